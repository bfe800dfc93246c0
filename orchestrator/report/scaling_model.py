"""An alpha-beta model of one data-parallel epoch, fitted from a sweep's own
measurements, checked against its multi-worker trials, extrapolated to 64 workers.

Per step on k workers (docs/SCALING_MODEL.md has the derivation):

    compute(k) = s1 * largest_shard(k) * contention(k)   # s1: seconds per example, 1 worker
    other      = the 1-worker step's remainder            # optimizer update, slicing: not / k
    comm(k)    = calls * alpha + volume(k) * bytes / beta # volume 2(k-1)/k for a ring allreduce;
                                                          # root: 2(k-1) of each, at worker 0

`s1` and `other` come from the 1-worker trial, `contention` from the calibration's
concurrent compute, `alpha` and `beta` from its allreduce microbenchmark (per
transport) or from a named interconnect, `bytes` from the gradient bytes it
recorded per model. ddp's comm is counted as exposed, as bucketed's: an upper
bound, since ddp overlaps it with backward. No Ray or torch here.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.config.dataset import even_shares
from orchestrator.config.options import TrainConfig
from orchestrator.records import ROOT_FUNNEL, SHARDED_PAIR, Status
from orchestrator.report.summary import SCALING_GROUP, per_worker_values

PREDICTED_WORKERS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Link:
    name: str  # "shared memory (measured)", "gloo (measured)", "10 Gb/s Ethernet", ...
    alpha_s: float  # seconds per collective call
    beta_bytes_per_s: float  # effective (bus) bandwidth of a ring allreduce
    source: str  # where the numbers come from, short; docs/SCALING_MODEL.md in full


# Named interconnects for the extrapolation; derivations in docs/SCALING_MODEL.md.
INTERCONNECTS = (
    Link("10 Gb/s Ethernet", 100e-6, 0.9 * 1.25e9,
         "assumed: IEEE 802.3ae line rate 1.25e9 B/s at 90%, 100 us per call (TCP)"),
    Link("100 Gb/s Ethernet (RDMA)", 50e-6, 0.9 * 12.5e9,
         "assumed: line rate 12.5e9 B/s at 90%; ~50 us per call as in "
         "github.com/NVIDIA/nccl/issues/1244"),
    Link("NVLink, 8x H100 (NCCL)", 10e-6, 370e9,
         "ring busbw ~370 GB/s: github.com/NVIDIA/nccl-tests/issues/212; 10 us assumed"),
)


def fit_link(transport: str, samples: list[dict]) -> Link:
    """Least squares of `seconds = alpha + 2(k-1)/k * bytes / beta` over the allreduce
    samples of `transport` (the book's root funnel: `2(k-1) * (alpha + bytes / beta)`,
    its messages' own alpha and beta), alpha clamped at 0 (refitted through the origin then).

    A slope that is not positive (sizes too close to resolve it) gives an infinite beta.
    """
    own = [s for s in samples if s["transport"] == transport]
    terms = [_per_call(transport, s["num_workers"]) for s in own]
    volume_bytes = np.array([volume * s["bytes"] for s, (_, volume) in zip(own, terms)], float)
    seconds = np.array([s["seconds"] for s in own], float)
    design = np.column_stack([[latencies for latencies, _ in terms], volume_bytes])
    (alpha_s, s_per_byte), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    if alpha_s < 0:
        alpha_s, s_per_byte = 0.0, volume_bytes @ seconds / (volume_bytes @ volume_bytes)
    workers = ", ".join(str(k) for k in sorted({s["num_workers"] for s in own}))
    return Link(f"{transport} (measured)", float(alpha_s),
                1.0 / s_per_byte if s_per_byte > 0 else math.inf,
                f"measured at the sweep's start, {workers} workers")


def contention(calibration: dict, num_workers: int) -> float:
    """s(k) / s(1): how much slower one worker computes while k compute at once.

    Interpolated between measured worker counts; above the largest measured, that
    one's value (contention is not extrapolated); 1.0 without a 1-worker measurement.
    """
    measured = {int(c["num_workers"]): c["seconds_per_example"]
                for c in calibration.get("compute", [])}
    if 1 not in measured:
        return 1.0
    counts = sorted(measured)
    per_example_s = np.interp(num_workers, counts, [measured[k] for k in counts])
    return float(per_example_s / measured[1])


@dataclass(frozen=True)
class ScalingResult:
    links: pd.DataFrame  # link, alpha_s, beta_bytes_per_s, source
    # trial_id, model, sync, transport, num_workers, global_batch_size, measured_epoch_s,
    # predicted_epoch_s, error (signed fraction), measured_speedup (over its baseline)
    validation: pd.DataFrame
    # link, model, sync, batch_scaling (global: b kept; per-worker: k*b), num_workers,
    # global_batch_size, epoch_s, compute_s, comm_s, speedup, efficiency;
    # num_workers in PREDICTED_WORKERS
    predictions: pd.DataFrame


@dataclass(frozen=True)
class _Baseline:
    """What a 1-worker trial says about one step."""

    trial: pd.Series
    per_example_s: float  # forward+backward seconds per example
    other_s: float  # per step: neither compute nor communication
    epoch_s: float  # measured, median of the steady epochs
    gradient_bytes: dict  # the calibration's for its model, precision and bucket cap


def fit_and_validate(summary: pd.DataFrame, epochs: pd.DataFrame,
                     calibration: dict) -> ScalingResult | None:
    """Fit, validate and predict; None without a usable 1-worker trial or allreduce
    sample, or without gradient bytes (a calibration.json from before they were recorded)."""
    samples = calibration.get("allreduce", [])
    usable = summary[summary["status"] != Status.FAILED]
    singles = usable[(usable["num_workers"] == 1) & (usable["straggler_slowdown"] == 1)]
    # A baseline needs its workers' compute seconds (older sweeps did not record them).
    timed = epochs["worker_compute_s"].map(lambda values: per_worker_values(values) is not None)
    singles = singles[singles["trial_id"].isin(epochs[timed]["trial_id"])]
    if not samples or singles.empty or "gradient_bytes" not in calibration:
        return None
    measured = {t: fit_link(t, samples) for t in dict.fromkeys(s["transport"] for s in samples)}
    validation, baselines = [], {}
    candidates = usable[(usable["num_workers"] > 1) & (usable["split"] == "even")
                        & (usable["straggler_slowdown"] == 1)]
    for _, trial in candidates.iterrows():
        row = _validate(trial, singles, epochs, measured, calibration)
        if row is not None:
            baseline = row.pop("baseline")
            validation.append(row)
            baselines.setdefault((baseline.trial["model"], baseline.trial["sync"]), baseline)
    if not baselines:  # no multi-worker trial: predict from each 1-worker one alone
        for _, single in singles.iterrows():
            baselines.setdefault((single["model"], single["sync"]),
                                 _baseline_costs(single, epochs, calibration))
    # On this cluster each strategy sums over the transport it used, its workers
    # contending as calibrated; on a named interconnect each worker has a device of
    # its own (an empty calibration: contention 1).
    predictions = [_predict_curve(baseline, link, contending)
                   for baseline in baselines.values()
                   for link, contending in [(_own_link(baseline.trial["sync"], measured),
                                             calibration),
                                            *((link, {}) for link in INTERCONNECTS)]
                   if link is not None]
    links = [*measured.values(), *INTERCONNECTS]
    return ScalingResult(
        links=pd.DataFrame([vars(link) for link in links]).rename(columns={"name": "link"}),
        validation=pd.DataFrame(validation, columns=_VALIDATION_COLUMNS),
        predictions=pd.concat(predictions, ignore_index=True))


_VALIDATION_COLUMNS = ["trial_id", "model", "sync", "transport", "num_workers",
                       "global_batch_size", "measured_epoch_s", "predicted_epoch_s", "error",
                       "measured_speedup"]


def _validate(trial: pd.Series, singles: pd.DataFrame, epochs: pd.DataFrame,
              measured: dict[str, Link], calibration: dict) -> dict | None:
    """The trial's predicted against its measured epoch, or None if it has no
    baseline or its transport was not calibrated."""
    history = epochs[epochs["trial_id"] == trial["trial_id"]]
    transport = next((t for t in history["transport"] if t != "none"), None)
    single = _baseline_trial(trial, singles)
    if trial["sync"] == "sharded":  # its own two collectives, where they were timed
        transport = next((t for t in measured if t == f"{transport} {SHARDED_PAIR}"), transport)
    if single is None or transport not in measured:
        return None
    baseline = _baseline_costs(single, epochs, calibration)
    num_workers = int(trial["num_workers"])
    step = _step_s(baseline, measured[transport], num_workers,
                   int(trial["batch_size_per_worker"]), contention(calibration, num_workers))
    # Only the trial's own plan (steps, shard) and transport name: never its timings.
    predicted_s = int(trial["steps_per_epoch"]) * sum(step)
    measured_s = _steady(history)["epoch_time_s"].median()
    return {"trial_id": trial["trial_id"], "model": trial["model"], "sync": trial["sync"],
            "transport": transport, "num_workers": num_workers,
            "global_batch_size": int(trial["global_batch_size"]),
            "measured_epoch_s": measured_s, "predicted_epoch_s": predicted_s,
            "error": (predicted_s - measured_s) / measured_s,
            "measured_speedup": baseline.epoch_s / measured_s, "baseline": baseline}


def _own_link(sync: str, measured: dict[str, Link]) -> Link | None:
    """The measured transport `sync` sums over on this cluster: scratch and bucketed
    a node's shared memory where it was measured, ddp the process group's
    allreduce, sharded the group's reduce-scatter and all-gather, root the group's
    sends and receives."""
    group = next((t for t in measured if t in ("gloo", "nccl")), None)
    if sync == ROOT_FUNNEL and f"{group} {ROOT_FUNNEL}" in measured:
        return measured[f"{group} {ROOT_FUNNEL}"]
    if sync in ("scratch", "bucketed") and "shared memory" in measured:
        return measured["shared memory"]
    if sync == "sharded" and f"{group} {SHARDED_PAIR}" in measured:
        return measured[f"{group} {SHARDED_PAIR}"]
    return measured.get(group)


def _baseline_trial(trial: pd.Series, singles: pd.DataFrame) -> pd.Series | None:
    """The 1-worker trial of the same scaling group, threads and straggler; else the
    one of the same model, sync, precision and threads with the closest global batch."""
    exact = [*SCALING_GROUP, "threads_per_worker", "straggler_slowdown"]
    same = singles[(singles[exact] == trial[exact]).all(axis=1)]
    if not same.empty:
        return same.iloc[0]
    loose = ["model", "sync", "precision", "threads_per_worker"]
    near = singles[(singles[loose] == trial[loose]).all(axis=1)]
    if near.empty:
        return None
    return near.loc[(near["global_batch_size"] - trial["global_batch_size"]).abs().idxmin()]


def _baseline_costs(single: pd.Series, epochs: pd.DataFrame, calibration: dict) -> _Baseline:
    history = _steady(epochs[epochs["trial_id"] == single["trial_id"]])
    compute_s = history["worker_compute_s"].map(lambda v: max(per_worker_values(v)))
    steps = int(single["steps_per_epoch"])
    other_s = (history["epoch_time_s"] - compute_s - history["sync_time_s"]) / steps
    recorded = {(entry["model"], entry["precision"], entry["bucket_cap_mb"]): entry
                for entry in calibration["gradient_bytes"]}
    layout = (single["model"], single["precision"],
              single.get("bucket_cap_mb", TrainConfig.bucket_cap_mb))
    return _Baseline(single, (compute_s / (steps * int(single["global_batch_size"]))).median(),
                     other_s.median(), history["epoch_time_s"].median(), recorded[layout])


def _predict_curve(baseline: _Baseline, link: Link, calibration: dict) -> pd.DataFrame:
    """Both of 13.5.1's ways to add workers, from the baseline's global batch b:
    "global" keeps it (shard b/k, 13.5's experiment), "per-worker" gives each worker
    b (global k*b, 13.6's, and 1/k of the steps). Speedup is the epoch's.
    An empty `calibration` means contention 1: each worker on a device of its own."""
    trial = baseline.trial
    batch, steps = int(trial["global_batch_size"]), int(trial["steps_per_epoch"])
    rows = []
    for scaling in ("global", "per-worker"):
        for k in PREDICTED_WORKERS:
            global_batch_size = batch if scaling == "global" else k * batch
            largest_shard = max(even_shares(global_batch_size, k))
            compute_s, other_s, comm_s = _step_s(baseline, link, k, largest_shard,
                                                 contention(calibration, k))
            # The same examples per epoch: fewer, larger steps with a larger global batch.
            num_steps = steps * batch / global_batch_size
            rows.append({"link": link.name, "model": trial["model"], "sync": trial["sync"],
                         "batch_scaling": scaling, "num_workers": k,
                         "global_batch_size": global_batch_size,
                         "epoch_s": num_steps * (compute_s + other_s + comm_s),
                         "compute_s": num_steps * compute_s, "comm_s": num_steps * comm_s})
    curve = pd.DataFrame(rows)
    single_s = curve.groupby("batch_scaling")["epoch_s"].transform("first")
    curve["speedup"] = single_s / curve["epoch_s"]
    curve["efficiency"] = curve["speedup"] / curve["num_workers"]
    return curve


def _step_s(baseline: _Baseline, link: Link, num_workers: int, largest_shard: int,
            contention_factor: float) -> tuple[float, float, float]:
    """(compute, other, communication) seconds of one step."""
    compute_s = baseline.per_example_s * largest_shard * contention_factor
    comm_s = _comm_s(link, baseline.trial["sync"], baseline.gradient_bytes, num_workers)
    return compute_s, baseline.other_s, comm_s


def _comm_s(link: Link, sync: str, gradient_bytes: dict, num_workers: int) -> float:
    """Seconds of one step's collectives: a ring allreduce per message, or for sharded
    a reduce-scatter and an all-gather of the flat parameters, (k-1)/k each; for root
    (the book's allreduce), per tensor worker 0's k-1 receives and k-1 sends, one
    after another."""
    if num_workers == 1:
        return 0.0
    tensor_bytes = gradient_bytes["tensor_bytes"]
    if sync == ROOT_FUNNEL:
        latencies, volume = _per_call(ROOT_FUNNEL, num_workers)
        return sum(latencies * link.alpha_s + volume * size / link.beta_bytes_per_s
                   for size in tensor_bytes)
    if sync == "sharded" and SHARDED_PAIR in link.name:
        # Both collectives timed as one call: the pair moves a ring allreduce's bytes.
        messages = [(sum(tensor_bytes), _ring_volume(num_workers))]
    elif sync == "sharded":
        messages = [(sum(tensor_bytes), (num_workers - 1) / num_workers)] * 2
    else:
        sizes = tensor_bytes if sync == "scratch" else gradient_bytes["bucket_bytes"]
        messages = [(size, _ring_volume(num_workers)) for size in sizes]
    return sum(link.alpha_s + volume * size / link.beta_bytes_per_s for size, volume in messages)


def _per_call(transport: str, num_workers: int) -> tuple[float, float]:
    """(latencies, bytes sent or received per byte summed) of one call on its busiest
    worker: the book's root funnel, worker 0, 2(k-1) of each (a message at a time);
    a ring allreduce one alpha per call, 2(k-1)/k bytes."""
    if transport.endswith(ROOT_FUNNEL):
        return 2 * (num_workers - 1), 2 * (num_workers - 1)
    return 1, _ring_volume(num_workers)


def _ring_volume(num_workers: int) -> float:
    """Bytes each worker sends per byte of a ring allreduce: reduce-scatter, then all-gather."""
    return 2 * (num_workers - 1) / num_workers


def _steady(history: pd.DataFrame) -> pd.DataFrame:
    """The epochs past warm-up: all but the first when there are at least three."""
    return history[history["epoch"] > history["epoch"].min()] if len(history) >= 3 else history


def plot_scaling_model(axes, result: ScalingResult) -> None:
    """Speedup against workers: measured points, model curves, the ideal line.

    Curves: every sync on a measured link; on a named interconnect, one sync
    (bucketed if predicted) to keep the plot readable.
    """
    axes.plot(PREDICTED_WORKERS, PREDICTED_WORKERS, "k--", linewidth=1, label="ideal")
    predictions = result.predictions
    syncs = list(predictions["sync"].unique())
    shown_sync = "bucketed" if "bucketed" in syncs else syncs[0]
    several_models = predictions["model"].nunique() > 1
    global_batch = predictions[predictions["batch_scaling"] == "global"]
    for (link, model, sync), curve in global_batch.groupby(["link", "model", "sync"], sort=False):
        if not link.endswith("(measured)") and sync != shown_sync:
            continue
        label = f"{link}, {sync}" + (f", {model}" if several_models else "")
        axes.plot(curve["num_workers"], curve["speedup"], linewidth=1, label=label)
    markers = dict(zip(("scratch", "bucketed", "ddp", "sharded", "root", "delayed"), "osD^vP"))
    for sync, points in result.validation.groupby("sync"):
        axes.scatter(points["num_workers"], points["measured_speedup"], zorder=3,
                     marker=markers.get(sync, "x"), color="black", label=f"measured, {sync}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(PREDICTED_WORKERS, [str(k) for k in PREDICTED_WORKERS])
    axes.set_xlabel("workers (global batch fixed)")
    axes.set_ylabel("speedup over 1 worker")
    axes.set_title("Scaling model: measured points and predictions")
    axes.legend(fontsize="xx-small")
