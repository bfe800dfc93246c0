"""The sweep's Tune experiment: one Ray Tune trial per grid point, each fitting a TorchTrainer.

Two levels, named for where they run: `tune_trial` is the per-trial driver
(a Tune function that builds and fits a TorchTrainer, forwarding every epoch
to Tune through `ray_fastpath.report_to_tune_callback`); the workers run
`worker.train_loop_per_worker`. What Tune calls back as trials report and end
(the printed lines, the stoppers, ASHA) is in tune_callbacks.py; the finished
experiment is read back by tune_results.py.
"""

import os
import time

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from orchestrator import ray_fastpath
from orchestrator.driver import storage, tracking
from orchestrator.driver.interrupts import sigint_handler_kept
from orchestrator.driver.placement import Placement
from orchestrator.driver.rundir import TRAIN_RUNS_DIR
from orchestrator.config.dataset import shape_text
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import GridPoint, SweepConfig
from orchestrator.driver.trial import run_trial
# The classes Tune pickles with the experiment: a sweep saved before they moved
# to tune_callbacks.py names them here, and its --resume finds them so.
from orchestrator.driver.tune_callbacks import (LiveEstimate, ReachedTarget, TimeToAccuracyASHA,
                                                TrialLinePrinter)

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
              graph_held_off=config["point"].get("graph_held_off"),
              callbacks=[ray_fastpath.report_to_tune_callback()])


def run_experiment(sweep: SweepConfig, data_ref: ray.ObjectRef, *, storage_path: str,
              sweep_id: str, max_concurrent: int, resume: bool,
              max_hours: float | None = None,
              trackers: tracking.Trackers | None = None,
              placements: dict[int, Placement] | None = None,
              placement_nodes: int | None = None) -> tune.ResultGrid:
    """Run (or resume) the sweep's Tune experiment and return its results.

    `placements`: each worker count's whole nodes (placement.py), kept in
    each trial's config, so that a resumed trial is placed as it was;
    `placement_nodes`: the nodes they share out, for the estimate of the time left.

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
        estimate = LiveEstimate(sweep, max_concurrent, placements, placement_nodes)
        tuner = tune.Tuner(
            trainable,
            param_space={
                "point": tune.grid_search([_point_to_dict(point, placements,
                                                          sweep.graph_held_off)
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
    ray_fastpath.light_usage_tags()
    with sigint_handler_kept():  # Tune's handler would swallow a Ctrl-C after the fit
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


def _point_to_dict(point: GridPoint, placements: dict[int, Placement] | None,
                   graph_held_off: str | None = None) -> dict:
    placement = (placements or {}).get(point.train.num_workers)
    # The image shape as text ("1x28x28"), which TrainConfig reads back: Tune's
    # TensorBoard logger keeps scalars and text of a trial's config, and says at
    # every trial that it dropped a tuple.
    train = {**point.train.to_dict(), "input_shape": shape_text(point.train.input_shape)}
    return {"index": point.index, "batch_size": point.batch_size, "base_lr": point.base_lr,
            "train": train,
            "placement": placement.to_dict() if placement else None,
            "graph_held_off": graph_held_off}
