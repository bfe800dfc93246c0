"""One training run: a TorchTrainer of `config.num_workers` workers, fitted.

This is the per-trial driver. `experiments/train.py` calls it once; each
Ray Tune trial of the sweep calls it with a callback that reports to Tune.
The trainer class comes from `ray_fastpath`: Ray's own, or a leaner one.
"""

import dataclasses
import os
import time
import warnings
from collections.abc import Sequence

import ray
from ray.train import (CheckpointConfig, FailureConfig, LoggingConfig, RunConfig,
                       ScalingConfig, UserCallback)
from ray.train.torch import TorchConfig

from orchestrator.training import calibration
from orchestrator import ray_fastpath
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import SweepConfig
from orchestrator.driver.interrupts import sigint_handler_kept
from orchestrator.driver.placement import Placement
from orchestrator.training.worker import calibration_loop_per_worker, train_loop_per_worker

# Ray Train 2.60 builds every trainer's default data config from Ray Data's
# options, and reading one of them warns that it is deprecated: a warning from
# Ray to itself, printed by every trial process; no run of ours uses Ray Data.
warnings.filterwarnings("ignore", message=r"`ExecutionOptions\.exclude_resources` is deprecated",
                        category=DeprecationWarning)


class RetryPrinter(UserCallback):
    """One line when a worker fails: which run, which retry, from which epoch.

    Runs in Ray Train's controller, whose output Ray forwards to the driver,
    beside Ray's own report of the failure.
    """

    def __init__(self, name: str, max_failures: int):
        self.name = name
        self.max_failures = max_failures
        self.failures = 0
        self.checkpointed_epoch = None

    def after_report(self, run_context, metrics, checkpoint):
        if checkpoint:
            # Mid-epoch checkpoints hold the last finished epoch's state.
            self.checkpointed_epoch = int(metrics[0]["epoch"])

    def after_exception(self, run_context, worker_exceptions):
        self.failures += 1
        workers = "worker" + ("s" if len(worker_exceptions) > 1 else "")
        failed = ", ".join(f"{rank} ({type(error).__name__})"
                           for rank, error in sorted(worker_exceptions.items()))
        if 0 <= self.max_failures < self.failures:
            then = f"no retries left (max_failures {self.max_failures}): the run fails"
        else:
            limit = "(no limit)" if self.max_failures < 0 else f"of {self.max_failures}"
            # A checkpoint from an earlier session of this run is not seen here.
            start = (f"the checkpoint of epoch {self.checkpointed_epoch}"
                     if self.checkpointed_epoch else "its newest checkpoint, if any")
            then = f"retry {self.failures} {limit}, resuming from {start}"
        print(f"Ray Train run {self.name}: {workers} {failed} failed; {then}", flush=True)


def run_trial(config: TrainConfig, data_ref: ray.ObjectRef, *, name: str,
              storage_path: str | None = None, max_failures: int | None = None,
              callbacks: Sequence[UserCallback] = (),
              started_at: float | None = None,
              placement: Placement | None = None,
              stop_at: float | None = None,
              graph_held_off: str | None = None) -> ray.train.Result:
    """Fit one TorchTrainer; raises ray.train.TrainingFailedError when retries run out.

    `data_ref` is Fashion-MNIST in the object store: workers read it from
    there, once per node, whatever node they land on. `max_failures`: None
    means `config.max_failures`. `started_at` (`time.time()`, default now): the
    start the evaluations' wall seconds count from. `placement`: whole nodes of
    the trial's own (placement.py); None: Ray puts the workers where they fit.
    `stop_at`: the test accuracy at which the workers end training (loop.run_training).
    `graph_held_off`: why the trial's sweep captures no step under `--cuda-graph auto`
    (SweepConfig.graph_held_off).
    """
    if max_failures is None:
        max_failures = config.max_failures
    # Read where the trainer is built: the dashboard's Train API
    # (/api/train/v2/runs/v1) lists each run with its status. The user's setting wins.
    os.environ.setdefault("RAY_TRAIN_ENABLE_STATE_TRACKING", "1")
    return _fit(_trainer(
        train_loop_per_worker, config,
        {"train_config": config.to_dict(), "data": data_ref,
         "started_at": time.time() if started_at is None else started_at,
         "stop_at": stop_at, "graph_held_off": graph_held_off},
        RunConfig(name=name, storage_path=storage_path,
                  failure_config=FailureConfig(max_failures=max_failures),
                  # The newest checkpoint carries the whole epoch history; older ones
                  # are only disk, and a resumed trial restarts from the newest.
                  checkpoint_config=CheckpointConfig(num_to_keep=1),
                  callbacks=[*callbacks, RetryPrinter(name, max_failures)],
                  logging_config=LoggingConfig(log_level="WARNING")), placement))


def run_calibration(sweep: SweepConfig, *, name: str, storage_path: str,
                    placement: Placement | None = None) -> dict:
    """The sweep's microbenchmark (calibration.py) on as many workers as its
    largest trial, placed as that trial's are (`placement`); returns its measurements."""
    workers = max(point.train.num_workers for point in sweep.grid)
    config = dataclasses.replace(sweep.base, num_workers=workers)
    loop_config = {"train_config": config.to_dict(), "worker_counts": sorted(sweep.workers),
                   "transports": calibration.transports_of(sweep),
                   "layouts": calibration.layouts_of(sweep),
                   "sharded": any(point.train.sync == "sharded" for point in sweep.grid),
                   "probes": calibration.probes_of(sweep)}
    run_config = RunConfig(name=name, storage_path=storage_path,
                           failure_config=FailureConfig(max_failures=0),
                           logging_config=LoggingConfig(log_level="WARNING"))
    return _fit(_trainer(calibration_loop_per_worker, config, loop_config, run_config,
                         placement)).return_value


def _fit(trainer) -> ray.train.Result:
    """`trainer.fit()`, leaving the SIGINT handler as it found it (interrupts.py)."""
    with sigint_handler_kept():
        return trainer.fit()


def _trainer(loop, config: TrainConfig, loop_config: dict, run_config: RunConfig,
             placement: Placement | None = None):
    # Ray's default strategy (PACK) and the workers' own resources, unless placed.
    where = (dict(resources_per_worker=placement.resources_per_worker,
                  placement_strategy=placement.strategy) if placement
             else dict(resources_per_worker=config.resources_per_worker))
    return ray_fastpath.trainer_class()(
        loop, train_loop_config=loop_config,
        scaling_config=ScalingConfig(num_workers=config.num_workers, use_gpu=config.use_gpu,
                                     **where),
        torch_config=TorchConfig(backend=config.backend, timeout_s=config.collective_timeout),
        run_config=run_config)
