"""The sweep's Tune experiment: one Ray Tune trial per grid point, each fitting a TorchTrainer.

Two levels, named for where they run: `tune_trial` is the per-trial driver
(a Tune function that builds and fits a TorchTrainer, forwarding every epoch
to Tune through `ray_fastpath.report_to_tune_callback`); the workers run
`worker.train_loop_per_worker`.
"""

import math
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import ray
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from orchestrator.training import checkpoint
from orchestrator import ray_fastpath
from orchestrator.driver import storage, tracking
from orchestrator.driver.estimate import PointShape, SweepEstimate
from orchestrator.driver.placement import Placement
from orchestrator.config.dataset import shape_text
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import GridPoint, SweepConfig
from orchestrator.records import EPOCH_COLUMNS, EVALUATION_COLUMNS, Status, book_line, target_line
from orchestrator.driver.trial import run_trial

TRAIN_RUNS_DIR = "train-runs"
# The per-trial driver only waits on its TorchTrainer: it reserves memory but no
# CPU, so that a 2-worker trial fits a 2-CPU machine. (Tune rejects an empty
# request, and any CPU fraction would leave 1.99 CPUs for two 1-CPU workers.)
TRIAL_DRIVER_RESOURCES = {"cpu": 0, "memory": 256 * 1024 * 1024}
EXPERIMENT_STATE_PERIOD_S = "2"
# A trial's run options that trackers show as its parameters (the point holds them all).
TRACKED_PARAMS = ("model", "num_workers", "global_batch_size", "lr", "momentum", "sync",
                  "split", "precision", "num_epochs", "threads_per_worker", "use_gpu",
                  "gpus_per_worker", "straggler_slowdown", "seed")


def train_runs_path(storage_path: str, sweep_id: str) -> str:
    """The folder of the sweep's Train runs (one per trial), the sweep's own."""
    return storage.join(storage_path, TRAIN_RUNS_DIR, sweep_id)


def tune_trial(config: dict, data_refs: list[ray.ObjectRef], runs_path: str,
               stop_at: float | None = None) -> None:
    """One Tune trial: fit the TorchTrainer of one grid point, its Train run in
    `runs_path` (train_runs_path). That path comes with the trainable, not the
    trial's config, which a resumed sweep restores as it was: a sweep folder
    copied or moved since would send its runs to the old place. `stop_at`
    (--stop-at-target): the workers end training at the first evaluation that
    reaches it; Tune's stopper alone ends a trial only once its next report
    reaches Tune, and a trial of quick steps trained on past it."""
    started_at = time.time()  # wall seconds to a target count from here
    train = TrainConfig(**config["point"]["train"])
    placement = config["point"].get("placement")
    run_trial(train, data_refs[0], started_at=started_at,
              placement=Placement(**placement) if placement else None,
              # Named after the trial: a resumed sweep's unfinished trial
              # resumes its Train run from the last epoch checkpoint.
              name=tune.get_context().get_trial_id(),
              storage_path=runs_path, stop_at=stop_at,
              callbacks=[ray_fastpath.report_to_tune_callback()])


class LiveEstimate(tune.Callback, tune.stopper.Stopper):
    """Tune's side of `estimate.SweepEstimate`: feeds it every result and every
    trial's end, prints what it says, and stops the sweep when it says so
    (--max-hours). One object, both callback and stopper, so that the stopper
    reads what the callback learnt."""

    # The limit of the command running now, not kept with the instance: Tune
    # restores a resumed sweep's stopper as it was when the sweep started.
    max_hours: float | None = None
    # This command's callback, which Tune sets up and feeds: the stopper asks it.
    # A resumed sweep's stopper is another object, the one Tune saved with its
    # controller's state and restores over the one it is given (Ray 2.60's
    # TuneController.__setstate__ keeps `_stopper`, not `_callbacks`), as it was
    # when the sweep stopped: it would never stop this command's run.
    current: "LiveEstimate | None" = None

    def __init__(self, sweep: SweepConfig, max_concurrent: int):
        self.points = [PointShape.of(point) for point in sweep.grid]
        self.max_concurrent = max_concurrent
        self.estimate = SweepEstimate(self.points, max_concurrent)

    def setup(self, **info):
        # Called as each command starts its run, a resumed one included: the
        # clock and the measurements are this command's.
        self.estimate = SweepEstimate(self.points, self.max_concurrent,
                                      max_hours=LiveEstimate.max_hours)
        self.stopped_by: str | None = None  # how --max-hours stopped this command's run
        LiveEstimate.current = self

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.estimate.add_result(_point_index(trial), result)
        for other in trials:  # a resumed sweep's trials finished before it started
            if other.status in (Trial.TERMINATED, Trial.ERROR):
                self.estimate.trial_ended(_point_index(other))
        self._print_revision()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.estimate.trial_ended(_point_index(trial))
        self._print_revision()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.estimate.trial_ended(_point_index(trial))
        self._print_revision()

    def _print_revision(self) -> None:
        for line in self.estimate.revise():
            print(line, flush=True)

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False  # the results come through on_trial_result

    def stop_all(self) -> bool:
        """--max-hours stops the sweep as a Ctrl-C does. Tune's own stop-all would
        end the running trials as finished and its search as done, and --resume
        would then find nothing to run (2 of 3 epochs trained, the second trial
        never started: seen with Ray 2.60)."""
        live = LiveEstimate.current or self
        if not live.estimate.stop:
            return False
        if live.stopped_by is None:
            live.stopped_by = "SIGINT" if interrupt_tune_run() else "stop-all"
            if live.stopped_by == "stop-all":
                print("Tune catches no SIGINT here: its running trials end as they are, "
                      "and --resume will not continue them", flush=True)
        return live.stopped_by == "stop-all"


def interrupt_tune_run() -> bool:
    """Stop the Tune run of this process as a Ctrl-C does: tune.run's documented
    SIGINT handling saves the experiment's state with its trials unfinished, which
    `Tuner.restore(resume_unfinished=True)` continues from their last checkpoints.
    False, sending nothing, where Tune catches no SIGINT (its loop off the main
    thread, or TUNE_DISABLE_SIGINT_HANDLER): there the signal would end the process."""
    handler = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or not callable(handler) or handler is signal.default_int_handler):
        return False
    os.kill(os.getpid(), signal.SIGINT)
    return True


def _point_index(trial: Trial) -> int:
    return trial.config["point"]["index"]


class TrialLinePrinter(tune.Callback):
    """One line as each trial ends: the book's line, or why it did not finish, and
    when it reached the target accuracy, if there is one."""

    def __init__(self, target_acc: float | None):
        self.target_acc = target_acc
        self.evaluations: dict[str, list[dict]] = {}  # every result is an evaluation

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.evaluations.setdefault(trial.trial_id, []).append(result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        evaluations = self.evaluations.get(trial.trial_id, [])
        history = [row for row in evaluations if row["end_of_epoch"]]
        parts = []
        if history:
            parts.append(book_line(history)
                         + (" (diverged)" if history[-1]["status"] == Status.DIVERGED else ""))
        if evaluations and self.target_acc is not None:
            parts.append(target_line(evaluations, self.target_acc))
        if parts:
            print(f"trial {trial.trial_id} done: {'; '.join(parts)}", flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"trial {trial.trial_id} failed: see {trial.path}", flush=True)


class ReachedTarget(tune.Stopper):
    """--stop-at-target: Tune ends a trial at its first evaluation at or above the
    target, and its workers go to the next trial."""

    def __init__(self, target_acc: float):
        self.target_acc = target_acc

    def __call__(self, trial_id: str, result: dict) -> bool:
        return result["test_acc"] >= self.target_acc

    def stop_all(self) -> bool:
        return False


class TimeToAccuracyASHA(ASHAScheduler):
    """ASHA (rungs in epochs) for a sweep with a target accuracy.

    The book's recipe is never stopped early: its time to the target is the
    baseline. A trial ended at the target before a rung still counts at that
    rung, with the accuracy that got it there: the bar for the trials after
    it (else the fastest learners, ended first, would set none).
    """

    def __init__(self, target_acc: float, **asha_options):
        super().__init__(**asha_options)
        self.target_acc = target_acc
        self.num_epochs = asha_options["max_t"]

    def on_trial_result(self, tune_controller, trial, result):
        if TrainConfig(**trial.config["point"]["train"]).is_book_recipe:
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result):
        if result.get("test_acc", 0.0) >= self.target_acc:
            # ASHA records a trial at the highest rung a result passes, once per rung.
            for epoch in range(math.ceil(result["epoch"]), self.num_epochs):
                super().on_trial_result(tune_controller, trial, {**result, "epoch": epoch})
        super().on_trial_complete(tune_controller, trial, result)


def run_experiment(sweep: SweepConfig, data_ref: ray.ObjectRef, *, storage_path: str,
              sweep_id: str, max_concurrent: int, resume: bool,
              max_hours: float | None = None,
              trackers: tracking.Trackers | None = None,
              placements: dict[int, Placement] | None = None) -> tune.ResultGrid:
    """Run (or resume) the sweep's Tune experiment and return its results.

    `placements`: each worker count's whole nodes (placement.py), kept in
    each trial's config, so that a resumed trial is placed as it was.

    `trackers` (tracking.resolve): Tune's logger callbacks for them join the
    run config; a resumed sweep's come back with the rest of its Tune state.
    """
    # The data goes to the trials as a ref inside a list, so that Tune ships
    # the ref, not a second copy of the data set, to every trial.
    trainable = tune.with_resources(
        tune.with_parameters(tune_trial, data_refs=[data_ref],
                             runs_path=train_runs_path(storage_path, sweep_id),
                             stop_at=sweep.base.target_acc if sweep.stop_at_target else None),
        TRIAL_DRIVER_RESOURCES)
    # Tune saves which trials ended at most this often (by default every 10 s
    # or more): a driver killed outright re-runs, from its last checkpoint, a
    # trial that ended after the last save.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", EXPERIMENT_STATE_PERIOD_S)
    # Tune's newer console output ignores a reporter's columns; this one shows the grid.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    LiveEstimate.max_hours, LiveEstimate.current = max_hours, None
    if trackers is not None and trackers.wandb_mode:
        # Read by Ray's W&B callback (no API key is asked for offline) and, on
        # an embedded Ray, by the logging actors it starts.
        os.environ["WANDB_MODE"] = trackers.wandb_mode
    # The experiment is named after the sweep, so that sweeps sharing a
    # `--storage` never restore each other's trials.
    experiment_path = storage.join(storage_path, sweep_id)
    if resume:
        # Finished trials are kept; unfinished and errored ones run again, and
        # each resumes from its own last checkpoint.
        tuner = tune.Tuner.restore(experiment_path, trainable,
                                   resume_unfinished=True, resume_errored=True)
    else:
        # `epoch` is fractional mid-epoch: a trial's rung is its first evaluation past it.
        asha_options = dict(time_attr="epoch", metric="test_acc", mode="max",
                            max_t=sweep.base.num_epochs, grace_period=1)
        scheduler = None
        if sweep.scheduler == "asha":
            scheduler = (TimeToAccuracyASHA(sweep.base.target_acc, **asha_options)
                         if sweep.base.target_acc is not None else ASHAScheduler(**asha_options))
        estimate = LiveEstimate(sweep, max_concurrent)
        tuner = tune.Tuner(
            trainable,
            param_space={
                "point": tune.grid_search([_point_to_dict(point, placements)
                                           for point in sweep.grid]),
                # Beside the point, its run's values under their own names: what a
                # tracker shows as the trial's parameters.
                **{name: tune.sample_from(_run_value(name)) for name in TRACKED_PARAMS},
            },
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent, scheduler=scheduler,
                reuse_actors=ray_fastpath.reuse_trial_processes(),
                # Trial folders named by trial id alone: short paths, and the id
                # is what the result files use to name a trial.
                trial_name_creator=_trial_id, trial_dirname_creator=_trial_id),
            run_config=tune.RunConfig(
                name=sweep_id, storage_path=storage_path,
                stop=_stopper(sweep, estimate),
                # Retries happen inside a trial (Ray Train restarts its workers
                # from the last checkpoint); a trial that still fails stays failed.
                failure_config=tune.FailureConfig(max_failures=0),
                callbacks=[estimate, TrialLinePrinter(sweep.base.target_acc),
                           *(tracker_callbacks(trackers) if trackers else [])],
                progress_reporter=_progress_table(),
                verbose=1))  # the table, not every result in full
    return tuner.fit()


def tracker_callbacks(trackers: tracking.Trackers) -> list[tune.Callback]:
    """Tune's own logger callbacks for the sweep's trackers (imported here: each
    integration imports its tracker, seconds that a sweep without one never pays)."""
    callbacks = []
    if trackers.mlflow_uri:
        from ray.air.integrations.mlflow import MLflowLoggerCallback
        if trackers.mlflow_folder is not None:
            trackers.mlflow_folder.mkdir(parents=True, exist_ok=True)
        callbacks.append(_numbers_only(MLflowLoggerCallback)(
            tracking_uri=trackers.mlflow_uri, experiment_name=trackers.sweep_id,
            save_artifact=False))
    if trackers.tensorboard_logdir:
        # Tune adds this one by default too; named, it no longer depends on that.
        from ray.tune.logger import TBXLoggerCallback
        callbacks.append(_numbers_only(TBXLoggerCallback)())
    if trackers.wandb_mode:
        from ray.air.integrations.wandb import WandbLoggerCallback
        trackers.wandb_dir.mkdir(parents=True, exist_ok=True)
        callbacks.append(_numbers_only(WandbLoggerCallback)(
            project=trackers.wandb_project, group=trackers.sweep_id,
            mode=trackers.wandb_mode, dir=str(trackers.wandb_dir)))
    return callbacks


def _numbers_only(callback_class: type) -> type:
    """`callback_class`, given only a result's numbers: the trial's config is logged
    once as its parameters (MLflow would log every number in it as a metric again,
    at every epoch), and text or lists are no metric."""

    class NumbersOnly(callback_class):
        def log_trial_result(self, iteration, trial, result):
            super().log_trial_result(iteration, trial, {
                key: value for key, value in result.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)})

    NumbersOnly.__name__ = NumbersOnly.__qualname__ = callback_class.__name__
    return NumbersOnly


def _run_value(name: str):
    def value(config: dict) -> object:  # the trial's config, its point resolved
        return config["point"]["train"][name]
    return value


def _trial_id(trial) -> str:
    return trial.trial_id


def _stopper(sweep: SweepConfig, estimate: LiveEstimate) -> tune.Stopper:
    if not sweep.stop_at_target:
        return estimate
    return tune.stopper.CombinedStopper(estimate, ReachedTarget(sweep.base.target_acc))


def _progress_table() -> tune.CLIReporter:
    """Tune's live table, one column per swept value and the epoch's headline metrics."""
    return tune.CLIReporter(
        parameter_columns={"point/train/num_workers": "workers",
                           "point/train/global_batch_size": "global batch",
                           "point/train/lr": "lr", "point/train/momentum": "momentum",
                           "point/train/sync": "sync", "point/train/split": "split",
                           "point/train/precision": "precision",
                           "point/train/seed": "seed"},
        metric_columns={"epoch": "epoch", "test_acc": "test acc", "epoch_time_s": "s/epoch"},
        max_report_frequency=30)


def _point_to_dict(point: GridPoint, placements: dict[int, Placement] | None) -> dict:
    placement = (placements or {}).get(point.train.num_workers)
    # The image shape as text ("1x28x28"), which TrainConfig reads back: Tune's
    # TensorBoard logger keeps scalars and text of a trial's config, and says at
    # every trial that it dropped a tuple.
    train = {**point.train.to_dict(), "input_shape": shape_text(point.train.input_shape)}
    return {"index": point.index, "batch_size": point.batch_size, "base_lr": point.base_lr,
            "train": train,
            "placement": placement.to_dict() if placement else None}


def collect(result_grid: tune.ResultGrid, sweep: SweepConfig, storage_path: str, *,
            sweep_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trials, epochs, evaluations) frames from a finished (or interrupted) Tune experiment."""
    # Read from the experiment, not the results: a trial that never started
    # (the sweep was interrupted first) has a config but no result.
    # experiment_path is a path on the grid's filesystem: a bucket's has no scheme.
    configs = tune.ExperimentAnalysis(
        result_grid.experiment_path,
        storage_filesystem=result_grid.filesystem).get_all_configs()
    trial_rows, epoch_frames, evaluation_frames = [], [], []
    for result in result_grid:
        trial_id = Path(result.path).name  # see trial_dirname_creator
        point = sweep.grid[configs[trial_id]["point"]["index"]]
        train = point.train
        trial_rows.append({
            "trial_id": trial_id, "part": point.part, "seed": train.seed, "model": train.model,
            "dataset": train.dataset, "num_classes": train.num_classes,
            "sync": train.sync,
            "split": train.split, "precision": train.precision,
            "threads_per_worker": train.threads_per_worker,
            "straggler_slowdown": train.straggler_slowdown,
            "num_workers": train.num_workers, "batch_size": point.batch_size,
            "batch_scaling": point.batch_scaling, "base_lr": point.base_lr, "lr": train.lr,
            "momentum": train.momentum, "warmup_epochs": train.warmup_epochs,
            "warmup_start_lr": train.warmup_start_lr,
            "global_batch_size": train.global_batch_size,
            "batch_size_per_worker": train.batch_size_per_worker,
            "steps_per_epoch": train.steps_per_epoch, "num_epochs": train.num_epochs,
            "book_recipe": train.is_book_recipe,
            "error": _one_line(result.error) if result.error else "",
            "early_stopping": sweep.scheduler != "fifo", "stop_at_target": sweep.stop_at_target,
        })
        # From the newest checkpoint, not Tune's record: a report reaches Tune
        # only after its checkpoint is stored, so an epoch trained and kept
        # counts even if the workers or the driver died before the report.
        stored = checkpoint.read_newest_history(
            storage.join(train_runs_path(storage_path, sweep_id), trial_id))
        if stored is not None:
            history, evaluations = (pd.DataFrame(rows) for rows in stored)
        else:
            # Tune's record, where every report is an evaluation (no columns if none
            # came): an epoch's row has no eval_s, and until an epoch ends there are
            # no epoch columns.
            evaluations = history = result.metrics_dataframe
            if evaluations is not None and "end_of_epoch" in evaluations:
                history = evaluations[evaluations["end_of_epoch"].astype(bool)].reindex(
                    columns=EPOCH_COLUMNS)
                evaluations = evaluations.reindex(columns=EVALUATION_COLUMNS)
        if history is not None and "epoch" in history:
            epoch_frames.append(history.reindex(columns=EPOCH_COLUMNS).assign(trial_id=trial_id))
        if evaluations is not None and "epoch" in evaluations:
            evaluation_frames.append(evaluations[EVALUATION_COLUMNS].assign(trial_id=trial_id))
    return (pd.DataFrame(trial_rows), _concat(epoch_frames, EPOCH_COLUMNS),
            _concat(evaluation_frames, EVALUATION_COLUMNS))


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


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]
