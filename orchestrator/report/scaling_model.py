"""An alpha-beta model of one data-parallel epoch, fitted from a sweep's own
measurements, checked against its multi-worker trials, extrapolated to 64 workers.

Per step on k workers (docs/SCALING_MODEL.md has the derivation):

    compute(k) = (f + s1 * largest_shard(k)) * contention(k)  # s1: seconds per example
                                                          # beyond f, 1 worker; f: GPU
    other      = the 1-worker step's remainder            # optimizer update, slicing: not / k
    comm(k)    = sum over calls of steps(k) * alpha + volume(k) * bytes / beta

with steps(k) and volume(k) the transport's algorithm's (`per_call`): gloo's ring
2(k-1) steps and 2(k-1)/k bytes per worker; the book's root funnel 2(k-1) of each
at worker 0; the node's shared memory two barriers and (5k+1) bytes through the
node's one memory bandwidth. alpha is fitted per step at the calibration's k; how
it grows with k is the algorithm's.

`s1` and `other` come from the 1-worker trial; `f`, the part of an eager GPU step
no smaller shard saves (its kernels' launches), from the calibration's probe of one
worker's step at two batch sizes (0 on CPUs); `contention` from the calibration's
concurrent compute probe of the trial's model (never from the trials it validates:
their own compute seconds check it); `alpha` and `beta` from its allreduce
microbenchmark (per transport, a robust fit) or from a named interconnect, `bytes` from the gradient
bytes it recorded per model. ddp's comm is counted as exposed, as bucketed's: an upper
bound, since ddp overlaps it with backward. No Ray or torch here.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.config.dataset import FASHION_MNIST, TRAIN_SIZE, even_shares
from orchestrator.config.options import TrainConfig
from orchestrator.records import (ROOT_FUNNEL, SHARDED_PAIR, SHARED_MEMORY_SYNCS, LeftOut,
                                  Status)
from orchestrator.report.costs import (INTERCONNECTS, P2_16XLARGE, SHARED_MEMORY, Link, comm_s,
                                       contention, fit_link, probed_model, with_first_call)
from orchestrator.report.summary import (SCALING_GROUP, per_worker_values, shared_gpu_mask,
                                         steady_epochs)

PREDICTED_WORKERS = (1, 2, 4, 8, 16, 32, 64)


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
    shared_gpu: bool = False
    """The multi-worker trials shared a GPU: none validates the model, and nothing is
    forecast on this cluster's own transports."""


@dataclass(frozen=True)
class _Baseline:
    """What a 1-worker trial says about one step."""

    trial: pd.Series
    per_example_s: float  # forward+backward seconds per example, beyond `fixed_s`
    other_s: float  # per step: neither compute nor communication
    epoch_s: float  # measured: the mean of its seeds' epochs in the timing window
    gradient_bytes: dict  # the calibration's for its model, precision and bucket cap
    # Per forward and backward, seconds that no smaller shard saves: the launches
    # of an eager GPU step (calibration's "step_fixed"); 0 on a CPU.
    fixed_s: float = 0.0
    # Forward and backward passes a step (--accumulation-steps): each pays `fixed_s`.
    accumulation_steps: int = 1

    def compute_s(self, shard: int) -> float:
        """One worker's forward and backward seconds a step on `shard` examples."""
        return self.accumulation_steps * self.fixed_s + self.per_example_s * shard


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
    measured = {t: with_first_call(fit_link(t, samples), t, calibration.get("first_call", []))
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
    shared = bool(shared_gpu_mask(usable).any())
    predictions = [_predict_curve(baseline, link, contending, up_to)
                   for baseline in baselines.values()
                   for link, contending, up_to in [
                       # Workers that shared a GPU measured no link of devices of their
                       # own: nothing is forecast on this cluster's transports then.
                       (None if shared else _own_link(baseline.trial["sync"], measured),
                        lambda k, model=baseline.trial["model"]: contention(calibration, k,
                                                                           model),
                        measured_k),
                       *((link, lambda k: 1.0, None) for link in INTERCONNECTS)]
                   if link is not None]
    links = [*measured.values(), *INTERCONNECTS]
    return ScalingResult(
        links=pd.DataFrame([vars(link) for link in links]).rename(columns={"name": "link"}),
        validation=pd.DataFrame(validation, columns=_VALIDATION_COLUMNS),
        predictions=pd.concat(predictions, ignore_index=True), shared_gpu=shared)


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
                steps * baseline.compute_s(int(trial["batch_size_per_worker"]))),
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
    if sync in SHARED_MEMORY_SYNCS and SHARED_MEMORY in measured:
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
    compute_per_step = compute_s / steps
    passes = accumulation_steps(single)
    fixed_s = min(fixed_step_s(calibration, single, history),
                  float(compute_per_step.min()) / passes)
    return _Baseline(single, ((compute_per_step - passes * fixed_s)
                              / int(single["global_batch_size"])).mean(),
                     other_s.mean(), history["epoch_time_s"].mean(), recorded[layout],
                     fixed_s, passes)


def accumulation_steps(trial: pd.Series) -> int:
    """The trial's forward and backward passes a step: 1 in sweeps recorded before
    --accumulation-steps."""
    steps = trial.get("accumulation_steps")
    return 1 if steps is None or pd.isna(steps) else int(steps)


def fixed_step_s(calibration: dict, single: pd.Series, history: pd.DataFrame) -> float:
    """The part of the 1-worker trial `single`'s step that no smaller shard saves, as
    the calibration probed it on a GPU ("step_fixed": an eager step's launches) for
    its model, precision and memory layout (`history`'s); 0 where none was probed
    so (CPUs, whose steps scale with the shard; calibrations from before it; seeds
    whose `auto` chose different layouts), and
    where its step was replayed as a CUDA graph (`step_graph`), which the probe's
    eager steps say nothing of."""
    if "step_graph" in history and (history["step_graph"] == "on").any():
        return 0.0
    # Its seeds' one layout (each node's `auto` chooses its own: seeds that differ
    # match no entry, and f is 0).
    layouts = set(history["memory_format"]) if "memory_format" in history else set()
    return next((float(entry["fixed_s"]) for entry in calibration.get("step_fixed", [])
                 if entry and (entry["model"], entry.get("precision")) == (single["model"],
                                                                           single["precision"])
                 and {entry.get("memory_format")} == layouts), 0.0)


def _predict_curve(baseline: _Baseline, link: Link, contending,
                   up_to: int | None = None) -> pd.DataFrame:
    """Both of 13.5.1's ways to add workers, from the baseline's global batch b:
    "global" keeps it (shard b/k, 13.5's experiment), "per-worker" gives each worker
    b (global k*b, 13.6's, and 1/k of the steps). Speedup is the epoch's. An epoch is
    a pass over the whole training set (`epoch_examples`), whatever subset the trials
    ran: a forecast's global batch may outgrow the subset's epoch.
    `contending(k)`: the contention at k (1.0: each worker on a device of its own);
    `up_to`: the largest k to predict (None: every one of PREDICTED_WORKERS)."""
    trial = baseline.trial
    batch, examples = int(trial["global_batch_size"]), whole_epoch_examples(trial)
    rows = []
    for scaling in ("global", "per-worker"):
        for k in PREDICTED_WORKERS:
            if up_to is not None and k > up_to:
                continue
            global_batch_size = batch if scaling == "global" else k * batch
            largest_shard = max(even_shares(global_batch_size, k))
            compute_s, other_s, comm_s = _step_s(baseline, link, k, largest_shard,
                                                 contending(k))
            # The same examples per epoch: fewer, larger steps with a larger global
            # batch (a fraction of a step for the last, partial batch: speedups stay
            # ratios of throughput).
            num_steps = examples / global_batch_size
            rows.append({"link": link.name, "model": trial["model"], "sync": trial["sync"],
                         "batch_scaling": scaling, "num_workers": k,
                         "global_batch_size": global_batch_size, "epoch_examples": examples,
                         "epoch_s": num_steps * (compute_s + other_s + comm_s),
                         "compute_s": num_steps * compute_s, "comm_s": num_steps * comm_s})
    curve = pd.DataFrame(rows)
    single_s = curve.groupby("batch_scaling")["epoch_s"].transform("first")
    curve["speedup"] = single_s / curve["epoch_s"]
    curve["efficiency"] = curve["speedup"] / curve["num_workers"]
    return curve


def whole_epoch_examples(trial: pd.Series) -> int:
    """The examples of a pass over `trial`'s whole training set: trials.csv's
    `train_size`; for a sweep recorded before it, Fashion-MNIST's where the trial
    names that data set, else the trial's own epoch (its steps of its global batch)."""
    recorded = trial.get("train_size")
    if recorded is not None and not pd.isna(recorded):
        return int(recorded)
    if trial.get("dataset", FASHION_MNIST) == FASHION_MNIST:
        return TRAIN_SIZE
    return int(trial["steps_per_epoch"]) * int(trial["global_batch_size"])


def _step_s(baseline: _Baseline, link: Link, num_workers: int, largest_shard: int,
            contention_factor: float) -> tuple[float, float, float]:
    """(compute, other, communication) seconds of one step."""
    compute_s = baseline.compute_s(largest_shard) * contention_factor
    sums_s = comm_s(link, baseline.trial["sync"], baseline.gradient_bytes, num_workers)
    return compute_s, baseline.other_s, sums_s


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
    one_s = steps * (baseline.compute_s(batch) + baseline.other_s)
    rows = []
    for link in WHAT_IF_LINKS[use_gpu]:
        epoch_s = steps * batch / global_batch * sum(
            _step_s(baseline, link, num_workers, largest_shard, 1.0))
        rows.append({"link": link.name, "epoch_s": epoch_s, "speedup": one_s / epoch_s,
                     "baseline_trial": single["trial_id"],
                     "baseline_epoch_s": baseline.epoch_s})
    return rows
