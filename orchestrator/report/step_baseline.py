"""What a sweep's 1-worker trial says about one data-parallel step, the scaling
model's baseline (scaling_model.py, docs/SCALING_MODEL.md): its compute seconds
per example beyond the step's fixed part, the rest of its step, the gradient bytes
the calibration recorded for its layout; and a step's seconds on k workers over a
link (`step_s`). No Ray or torch here.
"""

from dataclasses import dataclass

import pandas as pd

from orchestrator.config.options import TrainConfig
from orchestrator.records import Status
from orchestrator.report.costs import Link, comm_s
from orchestrator.report.summary import SCALING_GROUP, per_worker_values, steady_epochs


@dataclass(frozen=True)
class StepBaseline:
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


def baseline_candidates(summary: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """The trials that can be a baseline: 1 worker, not failed, no straggler, with
    its workers' compute seconds recorded (older sweeps did not record them)."""
    singles = summary[(summary["status"] != Status.FAILED) & (summary["num_workers"] == 1)
                      & (summary["straggler_slowdown"] == 1)]
    timed = epochs["worker_compute_s"].map(
        lambda values: per_worker_values(values) is not None).astype(bool)  # empty: no epoch
    return singles[singles["trial_id"].isin(epochs.loc[timed, "trial_id"])]


def baseline_trials(trial: pd.Series, singles: pd.DataFrame) -> pd.DataFrame | None:
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


def baseline_costs(singles: pd.DataFrame, epochs: pd.DataFrame, calibration: dict) -> StepBaseline:
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
    return StepBaseline(single, ((compute_per_step - passes * fixed_s)
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


def step_s(baseline: StepBaseline, link: Link, num_workers: int, largest_shard: int,
           contention_factor: float) -> tuple[float, float, float]:
    """(compute, other, communication) seconds of one step."""
    compute_s = baseline.compute_s(largest_shard) * contention_factor
    sums_s = comm_s(link, baseline.trial["sync"], baseline.gradient_bytes, num_workers)
    return compute_s, baseline.other_s, sums_s
