"""A sweep's trials summarised: one row per trial with its grid values, outcome
(`records.Status`), speed, speedup and time to accuracy, from what the workers
reported per epoch and per evaluation.
"""

import ast
import math

import numpy as np
import pandas as pd

from orchestrator.records import Status
from orchestrator.report import noise_scale, time_to_accuracy

# A speedup compares trials of one momentum, strategy, split and precision.
SPEEDUP_AXES = ["momentum", "sync", "split", "precision"]

# Trials that share these differ only in the number of workers (and the seed):
# the 1-worker ones are the baseline of the others' speedup. `batch_size` is the
# grid's b, global or per worker as `batch_scaling` says; seeds are replicas.
SCALING_GROUP = ["model", *SPEEDUP_AXES, "threads_per_worker", "straggler_slowdown",
                 "batch_scaling", "batch_size", "base_lr"]
# At 1 worker a batch of b per worker is the global batch b: one baseline serves both.
BASELINE_KEYS = [key for key in SCALING_GROUP if key != "batch_scaling"]

# The tuning playbook's method: within each cell of the studied parameters,
# the learning rate is the nuisance parameter to optimise over.
# The number of epochs and the warm-up too: an accuracy after 2 epochs, or after
# a warm-up, is not a replica of one after 8 without.
ISOLATION_CELL = ["model", *SPEEDUP_AXES, "batch_scaling", "num_workers", "batch_size",
                  "num_epochs", "warmup_epochs"]

# Strategies compared on equal work: the same threads, straggler, transport and
# global batch (steps an epoch), differing in the lr and seed only.
STRATEGY_CELL = ["model", *SPEEDUP_AXES, "threads_per_worker", "straggler_slowdown",
                 "num_workers", "transport", "global_batch_size"]


def summarize_trials(trials: pd.DataFrame, epochs: pd.DataFrame, evaluations: pd.DataFrame,
                     target_acc: float | None = None) -> pd.DataFrame:
    """One row per trial: its grid values, derived values, outcome, speed and time
    to `target_acc`.

    `trials` holds the grid values and derived values of each trial, its
    `error` (empty if none), `early_stopping` (whether a scheduler may have
    stopped it: under one, and ended in Tune's saved state; one a Ctrl-C or
    --max-hours stopped short is interrupted) and `stop_at_target`; `epochs`
    and `evaluations` hold what the workers reported.
    """
    per_trial = epochs.sort_values("epoch").groupby("trial_id").agg(
        epochs_run=("epoch", "max"),
        final_test_acc=("test_acc", "last"),
        best_test_acc=("test_acc", "max"),
        final_train_loss=("train_loss", "last"),
        mean_epoch_time_s=("epoch_time_s", "mean"),
        mean_eval_time_s=("eval_time_s", "mean"),
        last_status=("status", "last"),
    )
    per_trial = per_trial.join(timed_epochs(epochs)[["epoch_s", "sync_share", "epoch_examples"]])
    summary = trials.merge(per_trial, left_on="trial_id", right_index=True, how="left").merge(
        time_to_accuracy.target_columns(evaluations, target_acc), left_on="trial_id",
        right_index=True, how="left").merge(noise_scale.per_trial(epochs), on="trial_id",
                                            how="left")
    summary["epochs_run"] = summary["epochs_run"].fillna(0).astype(int)
    if not evaluations.empty:  # the best of every evaluation, mid-epoch ones included
        best = evaluations.groupby("trial_id")["test_acc"].max()
        summary["best_test_acc"] = np.fmax(summary["best_test_acc"],
                                           summary["trial_id"].map(best))
    nodes = trial_nodes(epochs)
    summary["nodes"] = [nodes.get(trial_id, "") for trial_id in summary["trial_id"]]
    transports = trial_transports(epochs)
    summary["transport"] = [transports.get(trial_id, "") for trial_id in summary["trial_id"]]
    sharing = shared_gpu_trials(epochs)
    summary["shared_gpu"] = summary["trial_id"].isin(sharing)
    summary["status"] = [_status(row) for row in summary.itertuples()]
    # Down to the trial id: the order Tune hands trials back in (a resumed sweep's
    # differs) must not change which replica a table or the model reads first.
    return with_speedup(summary).sort_values(
        [*SCALING_GROUP, "num_workers", "trial_id"]).reset_index(drop=True)


def steady_epochs(epochs: pd.DataFrame) -> pd.DataFrame:
    """Each trial's epochs after its first (its only one, for a trial of one epoch):
    the one timing window of every time, throughput, speedup and sync share that the
    report, the answers and the scaling model print. The first epoch pays for warm-up
    (allocations, the layout's timing, caches) that the others do not, and is left
    out of every trial alike."""
    first = epochs.groupby("trial_id")["epoch"].transform("min")
    last = epochs.groupby("trial_id")["epoch"].transform("max")
    return epochs[(epochs["epoch"] > first) | (first == last)]


def timed_epochs(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per trial (the index), over its `steady_epochs`: `epoch_s`, their mean seconds;
    `sync_share`, the part of those seconds spent in gradient sync; `eval_s`, the
    mean seconds of scoring the test set after each; `epoch_examples`, the mean
    examples they trained; and `epochs_timed`, (first, last) of that window."""
    window = steady_epochs(epochs)
    # The examples each epoch trained (a diverged one stops short), where recorded.
    window = window.assign(examples=window["samples_per_s"] * window["epoch_time_s"]
                           if "samples_per_s" in window else math.nan)
    timed = window.groupby("trial_id").agg(
        epoch_s=("epoch_time_s", "mean"), sync_s=("sync_time_s", "mean"),
        eval_s=("eval_time_s", "mean"), epoch_examples=("examples", "mean"),
        first=("epoch", "min"), last=("epoch", "max"))
    timed["sync_share"] = timed.pop("sync_s") / timed["epoch_s"]
    timed["epochs_timed"] = list(zip(timed.pop("first"), timed.pop("last")))
    return timed


def epoch_examples(trials: pd.DataFrame) -> pd.Series:
    """The examples of one epoch: those its timed epochs trained (`timed_epochs`), else
    its plan's, its steps of one global batch each (the same for every full epoch)."""
    recorded = (trials["epoch_examples"] if "epoch_examples" in trials
                else pd.Series(math.nan, index=trials.index))
    if {"steps_per_epoch", "global_batch_size"} <= set(trials.columns):
        recorded = recorded.fillna(trials["steps_per_epoch"] * trials["global_batch_size"])
    return recorded


def trial_nodes(epochs: pd.DataFrame) -> dict[str, str]:
    """Each trial's node ids, space-separated: those its ranks ran on, in rank
    order of first appearance over its epochs (a restarted worker may have
    moved); empty for a trial run before `worker_nodes` was recorded."""
    if "worker_nodes" not in epochs:
        return {}
    nodes: dict[str, str] = {}
    for trial_id, history in epochs.sort_values("epoch").groupby("trial_id"):
        seen = dict.fromkeys(node for values in history["worker_nodes"]
                             for node in per_worker_values(values) or ())
        nodes[trial_id] = " ".join(seen)
    return nodes


def trial_transports(epochs: pd.DataFrame) -> pd.Series:
    """Each trial's transport of its sums (epochs.csv's `transport` in its last
    epoch: "shared memory", "gloo", "nccl", "none" for one worker), by trial id;
    empty for a trial run before it was recorded. One strategy may run over two
    transports, which are not the same work."""
    if "transport" not in epochs:
        return pd.Series(dtype=object)
    return (epochs.sort_values("epoch").groupby("trial_id")["transport"].last()
            .fillna("").astype(str))


def shared_gpu_trials(epochs: pd.DataFrame) -> set[str]:
    """Trials in which two workers ran on one GPU of one node (`--gpus-per-worker`
    0.5 or less): a device string such as "cuda:0" twice among a node's ranks; and
    trials whose GPU workers summed over gloo, which only such a fraction of a GPU
    each asks for (Ray may have put them on GPUs of their own, but their sums went
    through the host, not NCCL's: no GPU speedup either)."""
    if "devices" not in epochs:
        return set()
    sharing = set()
    for row in epochs.itertuples():
        devices = _device_list(row.devices)
        on_gpus = len(devices) > 1 and all(device.startswith("cuda") for device in devices)
        if on_gpus and getattr(row, "backend", "") == "gloo":
            sharing.add(row.trial_id)
            continue
        nodes = per_worker_values(getattr(row, "worker_nodes", None))
        if not nodes or len(devices) != len(nodes):
            continue
        placed = [(node, device) for node, device in zip(nodes, devices)
                  if device.startswith("cuda")]
        if len(set(placed)) < len(placed):
            sharing.add(row.trial_id)
    return sharing


def shared_gpu_mask(trials: pd.DataFrame) -> pd.Series:
    """Per row, whether the trial's workers shared a GPU: `shared_gpu` where a summary
    has it, False where it is missing (a trials.csv of an earlier version, or NaN)."""
    shared = trials.get("shared_gpu", pd.Series(False, index=trials.index))
    return shared.astype(object).fillna(False).astype(bool)


def _device_list(devices) -> list[str]:
    """epochs.csv's `devices`, "[cuda:0, cuda:0]", as a list."""
    if not isinstance(devices, str):
        return []
    return [part.strip() for part in devices.strip("[]").split(",") if part.strip()]


def per_worker_values(values) -> list | None:
    """A per-worker list (shares, compute seconds, node ids); epochs.csv read back
    holds it as Python's text of it, "[170, 86]" or "['ab', 'cd']"; None for a
    trial run before these were recorded."""
    if isinstance(values, (list, tuple)):
        return list(values)
    if isinstance(values, str) and values.startswith("["):
        return ast.literal_eval(values)
    return None


def per_worker_text(values, spec: str) -> str:
    """A per-worker list as `a / b`, each value formatted by `spec`; empty for a
    trial run before these were recorded."""
    return " / ".join(format(value, spec) for value in per_worker_values(values) or ())


def _status(row) -> str:
    if isinstance(row.error, str) and row.error:
        return Status.FAILED
    if row.stop_at_target and not math.isnan(row.train_s_to_target):
        return Status.REACHED_TARGET
    if row.last_status == Status.DIVERGED:
        return Status.DIVERGED
    if row.epochs_run < row.num_epochs:
        return Status.STOPPED_EARLY if row.early_stopping else Status.INTERRUPTED
    return Status.FINISHED


def with_speedup(summary: pd.DataFrame) -> pd.DataFrame:
    """`baseline_rate`, `speedup` and `efficiency` from each trial's `epoch_s`: its
    throughput (`samples_per_s`, an epoch's examples over `epoch_s`) against its
    setup's 1-worker baseline, the throughput of the mean `epoch_s` of the setup's
    1-worker trials over every seed (each seed's mean first). A seed changes the
    weights, not the work, so the 1-worker replicas are repeated measurements of one
    throughput; pairing each k-worker trial with its own seed's would pair two noises
    at random. A speedup is then the ratio of the two epoch times printed beside it
    (each epoch the same examples). NaN for trials whose workers shared a GPU."""
    summary = summary.copy()
    summary["samples_per_s"] = epoch_examples(summary) / summary["epoch_s"]
    singles = summary[(summary["num_workers"] == 1) & (summary["status"] != Status.FAILED)
                      ].dropna(subset=["epoch_s"])
    if singles.empty:
        summary["baseline_rate"] = math.nan
    else:
        seeds = singles["seed"] if "seed" in singles else pd.Series(0, index=singles.index)
        per_seed = singles.assign(seed=seeds, examples=epoch_examples(singles)).groupby(
            [*BASELINE_KEYS, "seed"]).agg(epoch_s=("epoch_s", "mean"),
                                          examples=("examples", "first"))
        per_setup = per_seed.groupby(BASELINE_KEYS).agg(epoch_s=("epoch_s", "mean"),
                                                        examples=("examples", "first"))
        rates = per_setup["examples"] / per_setup["epoch_s"]
        keys = pd.MultiIndex.from_frame(summary[BASELINE_KEYS])
        summary["baseline_rate"] = rates.reindex(keys).to_numpy()
    # Workers that shared a GPU took turns on it: their throughput is no speedup to read.
    summary["speedup"] = (summary["samples_per_s"] / summary["baseline_rate"]).where(
        ~shared_gpu_mask(summary))
    summary["efficiency"] = summary["speedup"] / summary["num_workers"]
    return summary
