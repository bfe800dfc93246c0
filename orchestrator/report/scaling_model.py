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
bound, since ddp overlaps it with backward. What the 1-worker trial says about a step
is step_baseline.py's; a point the cluster could not hold is what_if.py's. No Ray or
torch here.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.config.dataset import FASHION_MNIST, TRAIN_SIZE, even_shares
from orchestrator.records import ROOT_FUNNEL, SHARDED_PAIR, SHARED_MEMORY_SYNCS, Status
from orchestrator.report.costs import (INTERCONNECTS, SHARED_MEMORY, Link, contention, fit_link,
                                       probed_model, with_first_call)
from orchestrator.report.step_baseline import (StepBaseline, baseline_candidates, baseline_costs,
                                               baseline_trials, step_s)
from orchestrator.report.summary import per_worker_values, shared_gpu_mask, steady_epochs

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


def fit_and_validate(summary: pd.DataFrame, epochs: pd.DataFrame,
                     calibration: dict) -> ScalingResult | None:
    """Fit, validate and predict; None without a usable 1-worker trial or allreduce
    sample, or without gradient bytes (a calibration.json from before they were recorded).
    Of a validated trial nothing but its plan and transport reaches its prediction:
    the contention is the probe's."""
    samples = calibration.get("allreduce", [])
    usable = summary[summary["status"] != Status.FAILED]
    singles = baseline_candidates(summary, epochs)
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
                                 baseline_costs(single.to_frame().T, epochs, calibration))
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
    ones = baseline_trials(trial, singles)
    if trial["sync"] == "sharded":  # its own two collectives, where they were timed
        transport = next((t for t in measured if t == f"{transport} {SHARDED_PAIR}"), transport)
    if ones is None or transport not in measured:
        return None
    baseline = baseline_costs(ones, epochs, calibration)
    num_workers = int(trial["num_workers"])
    factor = contention(calibration, num_workers, trial["model"])
    probed = probed_model(calibration, trial["model"])
    step = step_s(baseline, measured[transport], num_workers,
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


def _predict_curve(baseline: StepBaseline, link: Link, contending,
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
            compute_s, other_s, comm_s = step_s(baseline, link, k, largest_shard,
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
