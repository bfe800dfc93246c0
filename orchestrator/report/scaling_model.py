"""An alpha-beta model of one data-parallel epoch, fitted from a sweep's own
measurements, checked against its multi-worker trials, extrapolated to 64 workers.

Per step on k workers (docs/SCALING_MODEL.md has the derivation):

    compute(k) = s1 * largest_shard(k) * contention(k)   # s1: seconds per example, 1 worker
    other      = the 1-worker step's remainder            # optimizer update, slicing: not / k
    comm(k)    = sum over calls of steps(k) * alpha + volume(k) * bytes / beta

with steps(k) and volume(k) the transport's algorithm's (`per_call`): gloo's ring
2(k-1) steps and 2(k-1)/k bytes per worker; the book's root funnel 2(k-1) of each
at worker 0; the node's shared memory two barriers and (5k+1) bytes through the
node's one memory bandwidth. alpha is fitted per step at the calibration's k; how
it grows with k is the algorithm's.

`s1` and `other` come from the 1-worker trial; `contention` from the calibration's
concurrent compute probe of the trial's model (never from the trials it validates:
their own compute seconds check it); `alpha` and `beta` from its allreduce
microbenchmark (per transport, a robust fit) or from a named interconnect, `bytes` from the gradient
bytes it recorded per model. ddp's comm is counted as exposed, as bucketed's: an upper
bound, since ddp overlaps it with backward. No Ray or torch here.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.config.dataset import even_shares
from orchestrator.config.options import TrainConfig
from orchestrator.records import ROOT_FUNNEL, SHARDED_PAIR, LeftOut, Status
from orchestrator.report.summary import (SCALING_GROUP, per_worker_values, shared_gpu_mask,
                                         steady_epochs)

PREDICTED_WORKERS = (1, 2, 4, 8, 16, 32, 64)
SHARED_MEMORY = "shared memory"  # calibration.json's name of the node's shared-memory transport


@dataclass(frozen=True)
class Link:
    name: str  # "shared memory (measured)", "gloo (measured)", "10 Gb/s Ethernet", ...
    alpha_s: float  # seconds per latency step (a ring step, a message, a barrier)
    # Bytes per second of the transport's volume: a ring's bus bandwidth; for the
    # node's shared memory the node's memory bandwidth, shared by its k workers.
    beta_bytes_per_s: float
    source: str  # where the numbers come from, short; docs/SCALING_MODEL.md in full
    # A step's first sum, timed right after a backward (calibration's "first_call"):
    # its own alpha and beta where the calibration has them, else NaN (the one regime).
    first_alpha_s: float = math.nan
    first_beta_bytes_per_s: float = math.nan


# Named interconnects for the extrapolation; derivations in docs/SCALING_MODEL.md.
INTERCONNECTS = (
    Link("10 Gb/s Ethernet", 50e-6, 0.9 * 1.25e9,
         "assumed: IEEE 802.3ae line rate 1.25e9 B/s at 90%, 50 us per ring step (TCP)"),
    Link("100 Gb/s Ethernet (RDMA)", 25e-6, 0.9 * 12.5e9,
         "assumed: line rate 12.5e9 B/s at 90%; ~50 us per 2-node call (2 steps) as in "
         "github.com/NVIDIA/nccl/issues/1244"),
    Link("NVLink, 8x H100 (NCCL)", 1e-6, 370e9,
         "ring busbw ~370 GB/s: github.com/NVIDIA/nccl-tests/issues/212; 1 us a step assumed"),
)
# The book's p2.16xlarge: 16 GPUs (8 K80 boards of two GK210s) on PCIe 3.0; a ring crosses the
# host's PCIe switches. Derivation and sources in docs/SCALING_MODEL.md.
P2_16XLARGE = Link("PCIe 3.0, p2.16xlarge (8 K80 boards, 16 GPUs)", 10e-6, 12e9,
                   "assumed: PCIe 3.0 x16 ~12 GB/s effective a direction (15.75 GB/s raw), "
                   "10 us a step")


def fit_link(transport: str, samples: list[dict]) -> Link:
    """Fit `seconds = steps(k) * alpha + volume(k) * bytes / beta` over the allreduce
    samples of `transport`, steps and volume its algorithm's (`per_call`), so alpha
    is per step at the calibration's k and its growth with k is the algorithm's.

    In two regimes, as Hockney's model is fitted: beta from the larger half of
    the sizes, where bytes set the time; alpha then from the smaller half, with
    that beta. One line through every size mixes regimes that differ on real
    links: a token-bucket-shaped link passes a message within its burst at line
    rate, and a transport changes protocol at some size (eager, rendezvous). On
    a 50 Mbit/s netns link the book's root funnel took 2n/R for 1 MB and n/R for
    16 KB, and a line through all sizes read the link 1.8x faster than it was
    (bench/notes/scaling_held_out.md).

    Robust in both: beta by least absolute *relative* deviations (iteratively
    reweighted least squares) over the large sizes, alpha the median of the small
    sizes' per-step remainders, so one slow sample (a 1 KB call of 1.15 ms among
    28 us ones) sets neither. alpha clamped at 0; a slope that is not positive
    (sizes too close to resolve it) gives an infinite beta.
    """
    own = [s for s in samples if s["transport"] == transport]
    terms = [per_call(transport, s["num_workers"]) for s in own]
    sizes = np.array([s["bytes"] for s in own], float)
    steps = np.array([steps for steps, _ in terms], float)
    volume_bytes = np.array([volume * s["bytes"] for s, (_, volume) in zip(own, terms)], float)
    seconds = np.array([s["seconds"] for s in own], float)
    large = sizes >= np.median(np.unique(sizes))
    if len(np.unique(volume_bytes[large])) < 2:  # too few sizes for two regimes
        large = np.ones(len(own), bool)
    _, s_per_byte = _least_relative_deviations(
        np.column_stack([steps[large], volume_bytes[large]]), seconds[large])
    s_per_byte = max(s_per_byte, 0.0)
    small = ~large if (~large).any() else large
    alpha_s = max(0.0, float(np.median((seconds[small] - volume_bytes[small] * s_per_byte)
                                       / steps[small])))
    workers = ", ".join(str(k) for k in sorted({s["num_workers"] for s in own}))
    return Link(f"{transport} (measured)", alpha_s,
                float(1.0 / s_per_byte) if s_per_byte > 0 else math.inf,
                f"measured at the sweep's start, {workers} workers")


def _with_first_call(link: Link, transport: str, first_calls: list[dict]) -> Link:
    """`link` with its first-call regime fitted from `first_calls` where they time
    `transport` (calibrations from before they were recorded have none)."""
    if not any(sample["transport"] == transport for sample in first_calls):
        return link
    first = fit_link(transport, first_calls)
    return dataclasses.replace(link, first_alpha_s=first.alpha_s,
                               first_beta_bytes_per_s=first.beta_bytes_per_s)


def _least_relative_deviations(design: np.ndarray, seconds: np.ndarray,
                               iterations: int = 100) -> np.ndarray:
    """x minimising sum |design @ x - seconds| / seconds, by iteratively reweighted
    least squares (a median-like fit: a minority of outliers does not move it)."""
    rows, target = design / seconds[:, None], np.ones(len(seconds))
    weights = np.ones(len(seconds))
    for _ in range(iterations):
        root = np.sqrt(weights)
        x, *_ = np.linalg.lstsq(rows * root[:, None], target * root, rcond=None)
        weights = 1.0 / np.maximum(np.abs(rows @ x - target), 1e-9)
    return x


def contention(calibration: dict, num_workers: int, model: str | None = None) -> float:
    """s(k) / s(1): how much slower one worker computes while k compute at once, as
    the calibration's probe of `model` read it (`probed_model`).

    Interpolated between measured worker counts; above the largest measured, that
    one's value (contention is not extrapolated); 1.0 without a 1-worker measurement.
    """
    probed = probed_model(calibration, model)
    measured = {int(c["num_workers"]): c["seconds_per_example"]
                for c in calibration.get("compute", [])
                if sample_model(calibration, c) == probed}
    if 1 not in measured:
        return 1.0
    counts = sorted(measured)
    per_example_s = np.interp(num_workers, counts, [measured[k] for k in counts])
    return float(per_example_s / measured[1])


def probed_model(calibration: dict, model: str | None) -> str | None:
    """The model whose probe stands for `model`'s contention: its own where the
    calibration probed it, else the calibration's own model (a calibration from
    before each model was probed probed only that one)."""
    probed = {sample_model(calibration, c) for c in calibration.get("compute", [])}
    return model if model in probed else calibration.get("model")


def sample_model(calibration: dict, sample: dict) -> str | None:
    """The model a `compute` sample of the calibration probed (before 2026-11-26 a
    sample did not say: the calibration's own model)."""
    return sample.get("model", calibration.get("model"))


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
    epoch_s: float  # measured: the mean of its seeds' epochs in the timing window
    gradient_bytes: dict  # the calibration's for its model, precision and bucket cap


def fit_and_validate(summary: pd.DataFrame, epochs: pd.DataFrame,
                     calibration: dict) -> ScalingResult | None:
    """Fit, validate and predict; None without a usable 1-worker trial or allreduce
    sample, or without gradient bytes (a calibration.json from before they were recorded).
    Of a validated trial nothing but its plan and transport reaches its prediction:
    the contention is the probe's."""
    samples = calibration.get("allreduce", [])
    usable = summary[summary["status"] != Status.FAILED]
    singles = _baseline_candidates(summary, epochs)
    if not samples or singles.empty or "gradient_bytes" not in calibration:
        return None
    measured = {t: _with_first_call(fit_link(t, samples), t, calibration.get("first_call", []))
                for t in dict.fromkeys(s["transport"] for s in samples)}
    fitted_at = {t: {int(s["num_workers"]) for s in samples if s["transport"] == t}
                 for t in measured}
    # Workers that shared a GPU took turns on it: not the model's k devices.
    own_devices = ~shared_gpu_mask(usable)
    candidates = usable[(usable["num_workers"] > 1) & (usable["split"] == "even")
                        & (usable["straggler_slowdown"] == 1) & own_devices]
    validation, baselines = [], {}
    for _, trial in candidates.iterrows():
        row = _validate(trial, singles, epochs, measured, calibration)
        if row is not None:
            baseline = row.pop("baseline")
            row["held_out"] = row["num_workers"] not in fitted_at[row["transport"]]
            validation.append(row)
            baselines.setdefault((baseline.trial["model"], baseline.trial["sync"]), baseline)
    if not baselines:  # no multi-worker trial: predict from each 1-worker one alone
        for _, single in singles.iterrows():
            baselines.setdefault((single["model"], single["sync"]),
                                 _baseline_costs(single.to_frame().T, epochs, calibration))
    # On this cluster each strategy sums over the transport it used, its workers
    # contending as the probe measured; on a named interconnect each worker has a
    # device of its own: contention 1.
    # On this cluster's own transports, no further than the workers it measured at
    # once: its contention beyond them is not known (it was held at the largest k's).
    measured_k = max([int(c["num_workers"]) for c in calibration.get("compute", [])]
                     + [int(k) for k in usable["num_workers"]])
    predictions = [_predict_curve(baseline, link, contending, up_to)
                   for baseline in baselines.values()
                   for link, contending, up_to in [
                       (_own_link(baseline.trial["sync"], measured),
                        lambda k, model=baseline.trial["model"]: contention(calibration, k,
                                                                           model),
                        measured_k),
                       *((link, lambda k: 1.0, None) for link in INTERCONNECTS)]
                   if link is not None]
    links = [*measured.values(), *INTERCONNECTS]
    return ScalingResult(
        links=pd.DataFrame([vars(link) for link in links]).rename(columns={"name": "link"}),
        validation=pd.DataFrame(validation, columns=_VALIDATION_COLUMNS),
        predictions=pd.concat(predictions, ignore_index=True))


def _baseline_candidates(summary: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """The trials that can be a baseline: 1 worker, not failed, no straggler, with
    its workers' compute seconds recorded (older sweeps did not record them)."""
    singles = summary[(summary["status"] != Status.FAILED) & (summary["num_workers"] == 1)
                      & (summary["straggler_slowdown"] == 1)]
    timed = epochs["worker_compute_s"].map(
        lambda values: per_worker_values(values) is not None).astype(bool)  # empty: no epoch
    return singles[singles["trial_id"].isin(epochs.loc[timed, "trial_id"])]


# held_out: the trial's k is not one the calibration fitted its transport at.
# contention: the probe's at k; contention_source: "probe" (of the trial's model) or
# "probe of <model>" (another model's, where the calibration probed only that one);
# measured_contention: the trial's own (its slowest rank's compute seconds per
# example over its baseline's), which checks the probe and sets nothing.
# Per epoch, where the time went: the slowest rank's compute; rank 0's sync
# (measured_sync_s, its waits for the others included) and the sums' own time
# (measured_sync_least_s, from the column sync_measured_as names: `least_sync_s`);
# the model's compute and communication.
_VALIDATION_COLUMNS = ["trial_id", "model", "sync", "transport", "num_workers",
                       "global_batch_size", "measured_epoch_s", "predicted_epoch_s", "error",
                       "measured_speedup", "held_out", "contention", "contention_source",
                       "measured_contention",
                       "measured_compute_s", "predicted_compute_s", "measured_sync_s",
                       "measured_sync_least_s", "sync_measured_as", "predicted_comm_s",
                       "compute_error", "comm_error"]


def _validate(trial: pd.Series, singles: pd.DataFrame, epochs: pd.DataFrame,
              measured: dict[str, Link], calibration: dict) -> dict | None:
    """The trial's predicted against its measured epoch, or None if it has no
    baseline or its transport was not calibrated. Of the trial itself only its plan
    and transport are used."""
    history = epochs[epochs["trial_id"] == trial["trial_id"]]
    transport = next((t for t in history["transport"] if t != "none"), None)
    ones = _baseline_trials(trial, singles)
    if trial["sync"] == "sharded":  # its own two collectives, where they were timed
        transport = next((t for t in measured if t == f"{transport} {SHARDED_PAIR}"), transport)
    if ones is None or transport not in measured:
        return None
    baseline = _baseline_costs(ones, epochs, calibration)
    num_workers = int(trial["num_workers"])
    factor = contention(calibration, num_workers, trial["model"])
    probed = probed_model(calibration, trial["model"])
    step = _step_s(baseline, measured[transport], num_workers,
                   int(trial["batch_size_per_worker"]), factor)
    steps = int(trial["steps_per_epoch"])
    predicted_s = steps * sum(step)
    steady = steady_epochs(history)  # the report's and the answers' window
    measured_s = steady["epoch_time_s"].mean()
    # Where the time went, per epoch, each side: the slowest rank's compute and the sync.
    compute_s = steady["worker_compute_s"].map(
        lambda values: max(per_worker_values(values) or [np.nan]))
    sync_least_s, sync_column = least_sync_s(steady)
    return {"trial_id": trial["trial_id"], "model": trial["model"], "sync": trial["sync"],
            "transport": transport, "num_workers": num_workers,
            "global_batch_size": int(trial["global_batch_size"]),
            "measured_epoch_s": measured_s, "predicted_epoch_s": predicted_s,
            "error": (predicted_s - measured_s) / measured_s,
            # Throughputs: an epoch of the trial need not hold its baseline's examples
            # (ResNet-18 on CPUs trains k times the examples on k workers).
            "measured_speedup": (steps * int(trial["global_batch_size"]) / measured_s)
            / (int(baseline.trial["steps_per_epoch"])
               * int(baseline.trial["global_batch_size"]) / baseline.epoch_s),
            "contention": factor,
            "contention_source": "probe" if probed == trial["model"] else f"probe of {probed}",
            "measured_contention": compute_s.mean() / (
                steps * int(trial["batch_size_per_worker"]) * baseline.per_example_s),
            "measured_compute_s": compute_s.mean(), "predicted_compute_s": steps * step[0],
            "measured_sync_s": steady["sync_time_s"].mean(),
            "measured_sync_least_s": sync_least_s, "sync_measured_as": sync_column,
            "predicted_comm_s": steps * step[2],
            # Each component against its measured part: the slowest rank's compute, and
            # the sums' own time as nearly as the sweep recorded it (`least_sync_s`).
            "compute_error": _relative(steps * step[0], compute_s.mean()),
            "comm_error": _relative(steps * step[2], sync_least_s),
            "baseline": baseline}


def least_sync_s(history: pd.DataFrame) -> tuple[float, str]:
    """The sums' own seconds in an epoch, the mean over `history`'s epochs, and the
    column they come from: step by step the least any rank waited, summed
    (`sync_least_s`, CPU workers), else the least of the ranks' epoch totals
    (`worker_sync_s`, an upper bound: each holds its waits for the others where it
    arrived first), else rank 0's (`sync_time_s`, which holds all of its waits)."""
    for column, least in (("sync_least_s", lambda value: value),
                          ("worker_sync_s", lambda values: min(per_worker_values(values)
                                                               or [math.nan])),
                          ("sync_time_s", lambda value: value)):
        if column in history:
            seconds = history[column].map(least).astype(float)
            if seconds.notna().any():
                return float(seconds.mean()), column
    return math.nan, "sync_time_s"


def _relative(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN where nothing was measured."""
    return (predicted - measured) / measured if measured and measured > 0 else math.nan


def _own_link(sync: str, measured: dict[str, Link]) -> Link | None:
    """The measured transport `sync` sums over on this cluster: scratch and bucketed
    a node's shared memory where it was measured, ddp the process group's
    allreduce, sharded the group's reduce-scatter and all-gather, root the group's
    sends and receives."""
    group = next((t for t in measured if t in ("gloo", "nccl")), None)
    if sync == ROOT_FUNNEL and f"{group} {ROOT_FUNNEL}" in measured:
        return measured[f"{group} {ROOT_FUNNEL}"]
    if sync in ("scratch", "bucketed") and SHARED_MEMORY in measured:
        return measured[SHARED_MEMORY]
    if sync == "sharded" and f"{group} {SHARDED_PAIR}" in measured:
        return measured[f"{group} {SHARDED_PAIR}"]
    return measured.get(group)


def _baseline_trials(trial: pd.Series, singles: pd.DataFrame) -> pd.DataFrame | None:
    """The 1-worker trials (every seed) of the same scaling group, threads and
    straggler; else those of the same model, sync, precision and threads at the
    closest global batch and its lr. Their seeds are replicas of one baseline, as
    the report's speedups (`summary.with_speedup`) take them."""
    exact = [*SCALING_GROUP, "threads_per_worker", "straggler_slowdown"]
    same = singles[(singles[exact] == trial[exact]).all(axis=1)]
    if not same.empty:
        return same
    loose = ["model", "sync", "precision", "threads_per_worker"]
    near = singles[(singles[loose] == trial[loose]).all(axis=1)]
    if near.empty:
        return None
    closest = near.loc[(near["global_batch_size"] - trial["global_batch_size"]).abs().idxmin()]
    same_run = near["global_batch_size"] == closest["global_batch_size"]
    if "lr" in near:
        same_run &= near["lr"] == closest["lr"]
    return near[same_run]


def _baseline_costs(singles: pd.DataFrame, epochs: pd.DataFrame, calibration: dict) -> _Baseline:
    """One step's costs from the 1-worker trials `singles` (the seeds of one
    configuration): the means over all their epochs in the timing window."""
    single = singles.iloc[0]
    history = steady_epochs(epochs[epochs["trial_id"].isin(singles["trial_id"])])
    compute_s = history["worker_compute_s"].map(lambda v: max(per_worker_values(v)))
    steps = int(single["steps_per_epoch"])
    other_s = (history["epoch_time_s"] - compute_s - history["sync_time_s"]) / steps
    recorded = {(entry["model"], entry["precision"], entry["bucket_cap_mb"]): entry
                for entry in calibration["gradient_bytes"]}
    layout = (single["model"], single["precision"],
              single.get("bucket_cap_mb", TrainConfig.bucket_cap_mb))
    return _Baseline(single, (compute_s / (steps * int(single["global_batch_size"]))).mean(),
                     other_s.mean(), history["epoch_time_s"].mean(), recorded[layout])


def _predict_curve(baseline: _Baseline, link: Link, contending,
                   up_to: int | None = None) -> pd.DataFrame:
    """Both of 13.5.1's ways to add workers, from the baseline's global batch b:
    "global" keeps it (shard b/k, 13.5's experiment), "per-worker" gives each worker
    b (global k*b, 13.6's, and 1/k of the steps). Speedup is the epoch's.
    `contending(k)`: the contention at k (1.0: each worker on a device of its own);
    `up_to`: the largest k to predict (None: every one of PREDICTED_WORKERS)."""
    trial = baseline.trial
    batch, steps = int(trial["global_batch_size"]), int(trial["steps_per_epoch"])
    rows = []
    for scaling in ("global", "per-worker"):
        for k in PREDICTED_WORKERS:
            if up_to is not None and k > up_to:
                continue
            global_batch_size = batch if scaling == "global" else k * batch
            largest_shard = max(even_shares(global_batch_size, k))
            compute_s, other_s, comm_s = _step_s(baseline, link, k, largest_shard,
                                                 contending(k))
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
    """Seconds of one step's collectives: per message the transport's algorithm's
    steps (each `alpha`) and bytes (`per_call`); sharded, without its pair timed
    together, a reduce-scatter and an all-gather of the flat parameters, k-1 steps
    and (k-1)/k bytes each. The per-step alpha was fitted at the calibration's k;
    its k-dependence is the algorithm's: gloo's ring 2(k-1) steps, the root funnel
    2(k-1) messages, the shared memory two barriers whatever k. Where the link has a
    first-call regime, the step's first message costs what it cost right after a
    backward, and the others what they cost back to back."""
    if num_workers == 1:
        return 0.0
    tensor_bytes = gradient_bytes["tensor_bytes"]
    # root's algorithm is its own on any link; the others' their link's transport's.
    transport = ROOT_FUNNEL if sync == ROOT_FUNNEL else link.name.removesuffix(" (measured)")
    steps, volume = per_call(transport, num_workers)
    if sync == ROOT_FUNNEL:
        sizes = tensor_bytes
    elif sync == "sharded" and SHARDED_PAIR not in link.name:
        return 2 * ((num_workers - 1) * link.alpha_s + (num_workers - 1) / num_workers
                    * sum(tensor_bytes) / link.beta_bytes_per_s)
    elif sync == "sharded":  # both collectives timed as one call: a ring allreduce's bytes
        sizes = [sum(tensor_bytes)]
    else:
        sizes = tensor_bytes if sync == "scratch" else gradient_bytes["bucket_bytes"]
    # The step's first sum as it was timed right after a backward, where it was; the
    # rest back to back.
    back_to_back = (link.alpha_s, link.beta_bytes_per_s)
    first = (back_to_back if math.isnan(link.first_alpha_s)
             else (link.first_alpha_s, link.first_beta_bytes_per_s))
    regimes = [first] + [back_to_back] * (len(sizes) - 1)
    return sum(steps * alpha_s + volume * size / beta
               for size, (alpha_s, beta) in zip(sizes, regimes))


def per_call(transport: str, num_workers: int) -> tuple[float, float]:
    """(latency steps, bytes per byte summed) of one call of `transport`'s algorithm
    on `num_workers` workers, on the worker or resource that sets its pace:

    - the book's root funnel ("<group> root"): worker 0 receives k-1 messages,
      then sends k-1, one after another: 2(k-1) steps and 2(k-1) copies of the bytes;
    - the node's shared memory (training/sync/shm_allreduce.py): two barriers per
      call whatever k; each of the k workers copies its tensor in (n read, n
      written), sums its 1/k of the k slots (n read, n/k written) and copies the
      result out (n read, n written): 5n + n/k each, (5k+1) n through the node's
      one memory bandwidth, which the k workers share;
    - gloo's (and NCCL's) allreduce, a ring: reduce-scatter then all-gather, 2(k-1)
      steps, 2(k-1)/k bytes sent per worker; sharded's pair as one call likewise
      (its all-gather is a ring; its reduce-scatter's k-1 steps are assumed).
    """
    if transport.endswith(ROOT_FUNNEL):
        return 2 * (num_workers - 1), 2 * (num_workers - 1)
    if transport == SHARED_MEMORY:
        return 2, 5 * num_workers + 1
    return 2 * (num_workers - 1), _ring_volume(num_workers)


def _ring_volume(num_workers: int) -> float:
    """Bytes each worker sends per byte of a ring allreduce: reduce-scatter, then all-gather."""
    return 2 * (num_workers - 1) / num_workers


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


# The named links a point left out is estimated on: GPU workers as the book's
# p2.16xlarge and an NVLink node join them, CPU workers as nodes on Ethernet.
WHAT_IF_LINKS = {True: (P2_16XLARGE, INTERCONNECTS[2]), False: INTERCONNECTS[:2]}


def what_if(summary: pd.DataFrame, epochs: pd.DataFrame, calibration: dict | None,
            cell: LeftOut, use_gpu: bool) -> list[dict]:
    """A point the cluster could not hold, estimated from
    the sweep's 1-worker trial of its model, sync, precision and threads (the
    closest global batch, then lr) and the calibration's gradient bytes: per named link, its
    epoch seconds and speedup over the model's own 1-worker epoch, each worker
    on a device of its own (contention 1). [] without such a trial or bytes."""
    if not calibration or "gradient_bytes" not in calibration:
        return []
    singles = _baseline_candidates(summary, epochs)
    same = (singles[["model", "sync", "precision", "threads_per_worker"]]
            == [cell.model, cell.sync, cell.precision, cell.threads_per_worker])
    singles = singles[same.all(axis=1)]
    if singles.empty:
        return []
    # The closest global batch, then the closest lr.
    distance = pd.DataFrame({"batch": (singles["global_batch_size"]
                                       - cell.global_batch_size).abs(),
                             "lr": (singles["lr"] - cell.lr).abs()})
    single = singles.loc[distance.sort_values(["batch", "lr"]).index[0]]
    try:
        baseline = _baseline_costs(single.to_frame().T, epochs, calibration)
    except KeyError:  # no gradient bytes recorded for its layout
        return []
    batch, steps = int(single["global_batch_size"]), int(single["steps_per_epoch"])
    num_workers, global_batch = cell.num_workers, cell.global_batch_size
    largest_shard = max(even_shares(global_batch, num_workers))
    # The same examples an epoch: fewer, larger steps with a larger global batch.
    one_s = steps * (baseline.per_example_s * batch + baseline.other_s)
    rows = []
    for link in WHAT_IF_LINKS[use_gpu]:
        epoch_s = steps * batch / global_batch * sum(
            _step_s(baseline, link, num_workers, largest_shard, 1.0))
        rows.append({"link": link.name, "epoch_s": epoch_s, "speedup": one_s / epoch_s,
                     "baseline_trial": single["trial_id"],
                     "baseline_epoch_s": baseline.epoch_s})
    return rows
