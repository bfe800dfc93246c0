"""A sweep's Tune experiment read back: the trials, epochs and evaluations
frames for the report (`collect`), an experiment every trial of which ended,
read without Ray (`ended_experiment`), and how many of the grid's trials
Tune did not end."""

from pathlib import Path

import pandas as pd
from ray import tune
from ray.tune.experiment import Trial

from orchestrator.training import checkpoint
from orchestrator.driver import storage
from orchestrator.driver.failures import TRIAL, failure_text
from orchestrator.driver.model_check import first_worker_floor_mb
from orchestrator.driver.tune_experiment import train_runs_path
from orchestrator.config.grid import SweepConfig
from orchestrator.records import EPOCH_COLUMNS, EVALUATION_COLUMNS
from orchestrator.report import profile


_ENDED = (Trial.TERMINATED, Trial.ERROR)


def collect(result_grid: tune.ResultGrid, sweep: SweepConfig, storage_path: str, *,
            sweep_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trials, epochs, evaluations, profile) frames from a finished (or interrupted)
    Tune experiment; profile: `--profile-steps`' rows (report/profile.py), if any."""
    # Read from the experiment, not the results: a trial that never started
    # (the sweep was interrupted first) has a config but no result.
    # experiment_path is a path on the grid's filesystem: a bucket's has no scheme.
    analysis = tune.ExperimentAnalysis(result_grid.experiment_path,
                                       storage_filesystem=result_grid.filesystem)
    configs = analysis.get_all_configs()
    # Ended in the state Tune saved, which --resume reads: a trial a Ctrl-C or --max-hours
    # stopped is saved unfinished, though the grid in memory may count it terminated;
    # only an ended trial can have been stopped by the scheduler (ASHA), not interrupted.
    ended = {trial.trial_id for trial in analysis.trials if trial.status in _ENDED}
    trial_rows, epoch_frames, evaluation_frames, profile_rows = [], [], [], []
    for result in result_grid:
        trial_id = Path(result.path).name  # see trial_dirname_creator
        point = sweep.grid[configs[trial_id]["point"]["index"]]
        train = point.train
        trial_rows.append({
            "trial_id": trial_id, "part": point.part, "seed": train.seed, "model": train.model,
            "dataset": train.dataset, "num_classes": train.num_classes,
            "train_size": train.train_size,  # the data set's, whatever the trial's subset
            "sync": train.sync,
            "split": train.split, "precision": train.precision, "tf32": train.tf32,
            "threads_per_worker": train.threads_per_worker,
            "straggler_slowdown": train.straggler_slowdown,
            "num_workers": train.num_workers, "batch_size": point.batch_size,
            "batch_scaling": point.batch_scaling, "base_lr": point.base_lr, "lr": train.lr,
            "momentum": train.momentum, "warmup_epochs": train.warmup_epochs,
            "warmup_start_lr": train.warmup_start_lr,
            "global_batch_size": train.global_batch_size,
            "batch_size_per_worker": train.batch_size_per_worker,
            "accumulation_steps": train.accumulation_steps,
            "steps_per_epoch": train.steps_per_epoch, "num_epochs": train.num_epochs,
            "book_recipe": train.is_book_recipe,
            "error": (failure_text(result.error, TRIAL, train.batch_size_per_worker,
                                   train.precision) if result.error else ""),
            "early_stopping": sweep.scheduler != "fifo" and trial_id in ended,
            "stop_at_target": sweep.stop_at_target,
            "memory_floor_mb": first_worker_floor_mb(train),
        })
        # From the newest checkpoint, not Tune's record: a report reaches Tune
        # only after its checkpoint is stored, so an epoch trained and kept
        # counts even if the workers or the driver died before the report.
        stored = checkpoint.read_newest_history(
            storage.join(train_runs_path(storage_path, sweep_id), trial_id))
        if stored is not None:
            history, evaluations = (pd.DataFrame(rows) for rows in stored)
            reported = history
        else:
            # Tune's record, where every report is an evaluation (no columns if none
            # came): an epoch's row has no eval_s, and until an epoch ends there are
            # no epoch columns.
            reported = evaluations = history = result.metrics_dataframe
            if evaluations is not None and "end_of_epoch" in evaluations:
                history = evaluations[evaluations["end_of_epoch"].astype(bool)].reindex(
                    columns=EPOCH_COLUMNS)
                evaluations = evaluations.reindex(columns=EVALUATION_COLUMNS)
        if reported is not None:  # read before the epoch columns leave `profile` out
            profile_rows += profile.rows(reported, trial_id)
        if history is not None and "epoch" in history:
            epoch_frames.append(history.reindex(columns=EPOCH_COLUMNS).assign(trial_id=trial_id))
        if evaluations is not None and "epoch" in evaluations:
            evaluation_frames.append(evaluations[EVALUATION_COLUMNS].assign(trial_id=trial_id))
    return (pd.DataFrame(trial_rows), _concat(epoch_frames, EPOCH_COLUMNS),
            _concat(evaluation_frames, EVALUATION_COLUMNS),
            pd.DataFrame(profile_rows, columns=profile.PROFILE_COLUMNS))


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    return (pd.concat(frames, ignore_index=True) if frames
            else pd.DataFrame(columns=[*columns, "trial_id"]))


def ended_experiment(sweep: SweepConfig, storage_path: str,
                     sweep_id: str) -> tune.ResultGrid | None:
    """The sweep's Tune results read from its local storage alone, without Ray, if
    every grid point's trial ended without an error: what `Tuner.restore` with
    `resume_unfinished` and `resume_errored` would leave alone. Else None."""
    try:
        analysis = tune.ExperimentAnalysis(storage.join(storage_path, sweep_id))
    except (ValueError, OSError):  # no experiment state saved yet
        return None
    result_grid = tune.ResultGrid(analysis)
    if len(result_grid) == result_grid.num_terminated == len(sweep.grid):
        return result_grid
    return None


def trials_not_ended(result_grid: tune.ResultGrid, sweep: SweepConfig) -> int:
    """How many of the grid's trials Tune did not end (not started, or stopped):
    those `all_trials_ended` waits for."""
    return len(sweep.grid) - result_grid.num_terminated - result_grid.num_errors


def all_trials_ended(result_grid: tune.ResultGrid, sweep: SweepConfig) -> bool:
    """Whether Tune ended every grid point's trial (finished, stopped or failed).

    Tune creates trials as slots free up, so an interrupted sweep may hold
    fewer trials than the grid has points. Tune's statuses alone are not
    enough either: after a Ctrl-C, Tune stops the running trials, and a trial
    it stopped can come back as terminated (seen once in CI: exit 0, no
    --resume hint); the report's summary then still counts it interrupted by
    its epochs (`SweepReport.interrupted_trials`), and the Tune state that
    --resume reads, saved before the stop, has it running.
    """
    return trials_not_ended(result_grid, sweep) == 0
