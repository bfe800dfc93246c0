"""The sweep: one Ray Tune trial per grid point, each fitting a TorchTrainer.

Two levels, named for where they run: `tune_trial` is the per-trial driver
(a Tune function that builds and fits a TorchTrainer, forwarding every epoch
to Tune through `ray_fastpath.report_to_tune_callback`); the workers run
`worker.train_loop_per_worker`.
"""

import os
from pathlib import Path

import pandas as pd
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from orchestrator import checkpoint, ray_fastpath, storage
from orchestrator.config import GridPoint, SweepConfig, TrainConfig
from orchestrator.progress import book_line
from orchestrator.results import INTERRUPTED
from orchestrator.trial import run_trial

# The names of a sweep started before sweeps had an id (see `experiment_name`).
LEGACY_EXPERIMENT_NAME = "sweep"
# What each epoch row of epochs.csv keeps of a worker's report.
EPOCH_COLUMNS = ["epoch", "train_loss", "train_acc", "test_acc", "epoch_time_s",
                 "samples_per_s", "sync_time_s", "num_workers", "global_batch_size",
                 "batch_size_per_worker", "worker_shares", "worker_compute_s", "lr", "sync",
                 "split", "precision", "transport", "model", "device", "devices", "status"]
TRAIN_RUNS_DIR = "train-runs"
# The per-trial driver only waits on its TorchTrainer: it reserves memory but no
# CPU, so that a 2-worker trial fits a 2-CPU machine. (Tune rejects an empty
# request, and any CPU fraction would leave 1.99 CPUs for two 1-CPU workers.)
TRIAL_DRIVER_RESOURCES = {"cpu": 0, "memory": 256 * 1024 * 1024}
EXPERIMENT_STATE_PERIOD_S = "2"


def experiment_name(sweep_id: str | None) -> str:
    """The sweep's Tune experiment in its storage: named after the sweep, so
    that sweeps sharing a `--storage` never restore each other's trials."""
    return sweep_id or LEGACY_EXPERIMENT_NAME


def train_runs_path(storage_path: str, sweep_id: str | None) -> str:
    """The folder of the sweep's Train runs (one per trial), the sweep's own."""
    return storage.join(storage_path, TRAIN_RUNS_DIR, *([sweep_id] if sweep_id else []))


def tune_trial(config: dict, data_refs: list[ray.ObjectRef]) -> None:
    """One Tune trial: fit the TorchTrainer of one grid point."""
    train = TrainConfig(**config["point"]["train"])
    run_trial(train, data_refs[0],
              # Named after the trial: a resumed sweep's unfinished trial
              # resumes its Train run from the last epoch checkpoint.
              name=tune.get_context().get_trial_id(),
              # No sweep id: a trial of a sweep from before sweeps had one.
              storage_path=train_runs_path(config["storage"], config.get("sweep_id")),
              callbacks=[ray_fastpath.report_to_tune_callback()])


class TimeEstimate(tune.stopper.Stopper):
    """After the sweep's first epoch, says how long the sweep takes at that pace;
    with `max_hours`, stops it when that is longer (a ResNet-18 sweep on CPUs
    would otherwise train for hours without a word)."""

    # The limit of the command running now, not kept with the instance: Tune
    # restores a resumed sweep's stopper as it was when the sweep started.
    max_hours: float | None = None

    def __init__(self, sweep: SweepConfig, max_concurrent: int):
        self.num_trials, self.num_epochs = len(sweep.grid), sweep.base.num_epochs
        self.max_concurrent = max_concurrent
        self.estimated_hours: float | None = None

    def __call__(self, trial_id: str, result: dict) -> bool:
        if self.estimated_hours is None and "epoch_time_s" in result:
            self.estimated_hours = (result["epoch_time_s"] * self.num_trials * self.num_epochs
                                    / min(self.max_concurrent, self.num_trials) / 3600)
            print(f"first epoch: {result['epoch_time_s']:.0f} s of training; at that pace the "
                  f"sweep's {self.num_trials} trial(s) x {self.num_epochs} epochs take about "
                  f"{self.estimated_hours:.2f} h", flush=True)
            if self.stop_all():
                print(f"that exceeds --max-hours {self.max_hours:g}: stopping the sweep "
                      f"(--resume continues it)", flush=True)
        return False

    def stop_all(self) -> bool:
        return (self.max_hours is not None and self.estimated_hours is not None
                and self.estimated_hours > self.max_hours)


class TrialLinePrinter(tune.Callback):
    """One line as each trial ends: the book's line, or why it did not finish."""

    def __init__(self):
        self.histories: dict[str, list[dict]] = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.histories.setdefault(trial.trial_id, []).append(result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        history = self.histories.get(trial.trial_id)
        if history:
            status = history[-1].get("status")
            print(f"trial {trial.trial_id} done: {book_line(history)}"
                  + (" (diverged)" if status == "diverged" else ""), flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"trial {trial.trial_id} failed: see {trial.path}", flush=True)


def run_sweep(sweep: SweepConfig, data_ref: ray.ObjectRef, *, storage_path: str,
              sweep_id: str | None, max_concurrent: int, resume: bool,
              max_hours: float | None = None) -> tune.ResultGrid:
    """Run (or resume) the sweep's Tune experiment and return its results."""
    # The data goes to the trials as a ref inside a list, so that Tune ships
    # the ref, not a second copy of the data set, to every trial.
    trainable = tune.with_resources(tune.with_parameters(tune_trial, data_refs=[data_ref]),
                                    TRIAL_DRIVER_RESOURCES)
    # Tune saves which trials ended at most this often (by default every 10 s
    # or more): a driver killed outright re-runs, from its last checkpoint, a
    # trial that ended after the last save.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", EXPERIMENT_STATE_PERIOD_S)
    # Tune's newer console output ignores a reporter's columns; this one shows the grid.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    TimeEstimate.max_hours = max_hours
    experiment_path = storage.join(storage_path, experiment_name(sweep_id))
    if resume:
        # Finished trials are kept; unfinished and errored ones run again, and
        # each resumes from its own last checkpoint.
        tuner = tune.Tuner.restore(experiment_path, trainable,
                                   resume_unfinished=True, resume_errored=True)
    else:
        scheduler = (ASHAScheduler(time_attr="epoch", metric="test_acc", mode="max",
                                   max_t=sweep.base.num_epochs, grace_period=1)
                     if sweep.scheduler == "asha" else None)
        tuner = tune.Tuner(
            trainable,
            param_space={
                "point": tune.grid_search([_point_to_dict(point) for point in sweep.grid]),
                "storage": storage_path, "sweep_id": sweep_id,
            },
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent, scheduler=scheduler,
                reuse_actors=ray_fastpath.reuse_trial_processes(),
                # Trial folders named by trial id alone: short paths, and the id
                # is what the result files use to name a trial.
                trial_name_creator=_trial_id, trial_dirname_creator=_trial_id),
            run_config=tune.RunConfig(
                name=experiment_name(sweep_id), storage_path=storage_path,
                stop=TimeEstimate(sweep, max_concurrent),
                # Retries happen inside a trial (Ray Train restarts its workers
                # from the last checkpoint); a trial that still fails stays failed.
                failure_config=tune.FailureConfig(max_failures=0),
                callbacks=[TrialLinePrinter()], progress_reporter=_progress_table(),
                verbose=1))  # the table, not every result in full
    return tuner.fit()


def _trial_id(trial) -> str:
    return trial.trial_id


def _progress_table() -> tune.CLIReporter:
    """Tune's live table, one column per swept value and the epoch's headline metrics."""
    return tune.CLIReporter(
        parameter_columns={"point/train/num_workers": "workers",
                           "point/train/global_batch_size": "global batch",
                           "point/train/lr": "lr", "point/train/sync": "sync",
                           "point/train/split": "split", "point/train/precision": "precision"},
        metric_columns={"epoch": "epoch", "test_acc": "test acc", "epoch_time_s": "s/epoch"},
        max_report_frequency=30)


def _point_to_dict(point: GridPoint) -> dict:
    return {"index": point.index, "batch_size": point.batch_size, "base_lr": point.base_lr,
            "train": point.train.to_dict()}


def collect(result_grid: tune.ResultGrid, sweep: SweepConfig, storage_path: str, *,
            sweep_id: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials, epochs) frames from a finished (or interrupted) Tune experiment."""
    # Read from the experiment, not the results: a trial that never started
    # (the sweep was interrupted first) has a config but no result.
    configs = tune.ExperimentAnalysis(result_grid.experiment_path).get_all_configs()
    trial_rows, epoch_frames = [], []
    for result in result_grid:
        trial_id = Path(result.path).name  # see trial_dirname_creator
        point = sweep.grid[configs[trial_id]["point"]["index"]]
        train = point.train
        trial_rows.append({
            "trial_id": trial_id, "model": train.model, "sync": train.sync, "split": train.split,
            "precision": train.precision,
            "num_workers": train.num_workers, "batch_size": point.batch_size,
            "batch_scaling": sweep.batch_scaling, "base_lr": point.base_lr, "lr": train.lr,
            "global_batch_size": train.global_batch_size,
            "batch_size_per_worker": train.batch_size_per_worker,
            "steps_per_epoch": train.steps_per_epoch, "num_epochs": train.num_epochs,
            "error": _one_line(result.error) if result.error else "",
            "early_stopping": sweep.scheduler != "fifo",
        })
        # From the newest checkpoint, not Tune's record: a report reaches Tune
        # only after its checkpoint is stored, so an epoch trained and kept
        # counts even if the workers or the driver died before the report.
        history = checkpoint.read_newest_history(
            storage.join(train_runs_path(storage_path, sweep_id), trial_id))
        history = pd.DataFrame(history) if history else result.metrics_dataframe
        if history is not None and "epoch" in history:
            # reindex: a trial run by an older version lacks the newer columns.
            epoch_frames.append(history.reindex(columns=EPOCH_COLUMNS).assign(trial_id=trial_id))
    epochs = (pd.concat(epoch_frames, ignore_index=True) if epoch_frames
              else pd.DataFrame(columns=[*EPOCH_COLUMNS, "trial_id"]))
    return pd.DataFrame(trial_rows), epochs


def is_complete(result_grid: tune.ResultGrid, sweep: SweepConfig,
                summary: pd.DataFrame) -> bool:
    """Whether every grid point's trial ended (finished, stopped or failed).

    Tune creates trials as slots free up, so an interrupted sweep may hold
    fewer trials than the grid has points. Tune's statuses alone are not
    enough either: after a Ctrl-C, Tune stops the running trials, and a trial
    it stopped can come back as terminated (seen once in CI: exit 0, no
    --resume hint). Its epoch count in `summary` (`summarize_trials`) still
    says it did not finish, and the Tune state that --resume reads, saved
    before the stop, has it running.
    """
    all_ended = result_grid.num_terminated + result_grid.num_errors == len(sweep.grid)
    return all_ended and not (summary["status"] == INTERRUPTED).any()


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]
