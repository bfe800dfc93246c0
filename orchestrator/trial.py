"""One training run: a TorchTrainer of `config.num_workers` workers, fitted.

This is the per-trial driver. `experiments/train.py` calls it once; each
Ray Tune trial of the sweep calls it with a callback that reports to Tune.
"""

import asyncio
import os
from collections.abc import Sequence

import ray
from ray.train import (CheckpointConfig, FailureConfig, LoggingConfig, RunConfig,
                       ScalingConfig, UserCallback)
from ray.train.torch import TorchConfig, TorchTrainer
from ray.train.v2._internal.callbacks import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.controller.state import AbortedState
from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy

from orchestrator import cluster
from orchestrator.config import TrainConfig
from orchestrator.worker import train_loop_per_worker

DEFAULT_MAX_FAILURES = 2
# How often Ray Train's controller polls its workers (Ray's default: 2 s). The
# poll is what notices that training ended or a worker died, so every run
# waited a second on average for it at its end; a poll is one small remote
# call per worker.
HEALTH_CHECK_INTERVAL_S = "0.5"
# How often the placement-group cleaner asks whether the controller lives
# (Ray's default: 1 s).
PLACEMENT_GROUP_CHECK_INTERVAL_S = 5.0


class _NonBlockingPlacementGroupCleaner(PlacementGroupCleanerCallback):
    """Ray Train's placement-group cleaner, checking less often and stopped
    without waiting for it.

    The cleaner is a detached actor that removes a run's placement group if
    the controller dies without doing so; it is worth keeping. But stopping
    it waits for its monitor thread to wake from its sleep between checks,
    up to that interval added to the end of every run. By the time it is
    stopped the worker group, and with it the placement group, is already
    gone (Ray's controller shuts the group down first), so nothing depends
    on the stop having finished. And each check is a State API query through the
    dashboard and GCS, CPU taken beside the workers throughout training, to
    free a dead controller's CPUs a few seconds sooner.
    """

    def __init__(self):
        super().__init__(check_interval_s=PLACEMENT_GROUP_CHECK_INTERVAL_S)

    def _stop_cleaner(self):
        if self._cleaner:
            self._cleaner.stop.remote()
            self._cleaner = None


class _NoAutoscalerScalingPolicy(FixedScalingPolicy):
    """Ray Train's fixed-size policy, without asking an autoscaler for the workers.

    Every fit registers its workers' resources with Ray's autoscaling
    coordinator, and renews the request every 20 s, so that an autoscaling
    cluster grows to hold them. The coordinator is a detached actor, a
    process that the first fit on a cluster starts and waits for (it
    imports Ray Data), and that then wakes every 10 ms beside the workers.
    The embedded cluster has no autoscaler to forward the request to.
    """

    def after_controller_start(self, train_run_context):
        pass

    def _maybe_send_resource_request(self):
        pass


class _LeanTorchTrainer(TorchTrainer):
    """A TorchTrainer without the per-run helpers a run of ours never uses.

    Every fit starts its helper actors afresh, each a new process that
    imports Ray Train (and torch) before it is ready: on a 2-core machine
    that start-up, not training, is most of a short trial. This drops the
    Ray Data dataset manager, an actor that only serves
    `ray.train.get_dataset_shard` (our data comes from the object store, so
    no run passes `datasets`), and stops the placement-group cleaner without
    waiting (see above), does not register with an autoscaler on the
    embedded cluster (see above) and runs the controller inside a Tune
    trial's own process (see below). Everything else is Ray Train's own
    behaviour.
    """

    def _initialize_and_run_controller(self, **controller_init_kwargs):
        """Ray Train's controller, in this process when this process is an actor.

        Ray Train starts its controller as a new actor process on the
        caller's node for every fit; that process imports Ray Train and torch
        before it can start the workers, 2.3 s of every sweep trial on a
        2-core machine. A Tune trial is itself an actor with both already
        imported (kept from trial to trial), and the controller actor would
        share its fate anyway (it is owned by the trial), so the trial runs
        the same controller code itself. The workers' and the placement-group
        cleaner's handle on "the controller" is then the trial actor, which
        is where the controller lives. A plain driver (`experiments/train.py`)
        keeps Ray's controller actor and with it the graceful abort on Ctrl-C
        that Ray registers for it.
        """
        # Whichever process runs it, the controller asks no autoscaler for
        # workers on the embedded cluster (see _NoAutoscalerScalingPolicy).
        if cluster.is_fixed_size():
            controller_init_kwargs["scaling_policy"] = _NoAutoscalerScalingPolicy(
                self.scaling_config)
        if ray.get_runtime_context().get_actor_id() is None:
            return super()._initialize_and_run_controller(**controller_init_kwargs)
        controller = TrainController(**controller_init_kwargs)
        try:
            asyncio.run(controller.run())
        except SystemExit:
            # Tune stopped the trial (an ASHA rung) while the controller
            # handed it an epoch (see sweep.ReportToTune).
            _abort_keeping_the_process(controller)
            raise
        return controller.get_result()

    def _create_default_callbacks(self):
        callbacks = []
        for callback in super()._create_default_callbacks():
            if isinstance(callback, DatasetsCallback) and not self.datasets:
                continue
            if type(callback) is PlacementGroupCleanerCallback:
                callback = _NonBlockingPlacementGroupCleaner()
            callbacks.append(callback)
        return callbacks


def _abort_keeping_the_process(controller: TrainController) -> None:
    """Ray Train's `TrainController.abort`, without the `exit_actor` that ends it.

    Ray's abort ends the process it runs in, its controller actor; here that
    is a Tune trial's process, which Tune keeps for the next trial once the
    stopped one's thread has ended. The workers and their placement group go
    as in Ray's abort; the process stays.
    """
    controller._controller_callback_manager.invoke_best_effort("before_controller_abort")
    if controller.get_worker_group():
        controller.get_worker_group().abort()
    controller._set_state(AbortedState())


def resources_per_worker(config: TrainConfig) -> dict[str, float]:
    """What Ray reserves for one worker: its threads' CPUs, and a GPU if it owns one."""
    resources = {"CPU": float(config.threads_per_worker)}
    if config.use_gpu:
        resources["GPU"] = 1.0
    return resources


def run_trial(config: TrainConfig, data_ref: ray.ObjectRef, *, name: str,
              storage_path: str | None = None, max_failures: int = DEFAULT_MAX_FAILURES,
              callbacks: Sequence[UserCallback] = ()) -> ray.train.Result:
    """Fit one TorchTrainer; raises ray.train.TrainingFailedError when retries run out.

    `data_ref` is Fashion-MNIST in the object store: workers read it from
    there, once per node, whatever node they land on.
    """
    # Read by the controller, which Ray Train starts with this process's
    # value; the user's own setting wins.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", HEALTH_CHECK_INTERVAL_S)
    trainer = _LeanTorchTrainer(
        train_loop_per_worker,
        train_loop_config={"train_config": config.to_dict(), "data": data_ref},
        scaling_config=ScalingConfig(num_workers=config.num_workers, use_gpu=config.use_gpu,
                                     resources_per_worker=resources_per_worker(config)),
        torch_config=TorchConfig(backend="nccl" if config.use_gpu else "gloo"),
        run_config=RunConfig(
            name=name, storage_path=storage_path,
            failure_config=FailureConfig(max_failures=max_failures),
            # The newest checkpoint carries the whole epoch history; older ones
            # are only disk, and a resumed trial restarts from the newest.
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            callbacks=list(callbacks),
            logging_config=LoggingConfig(log_level="WARNING")))
    return trainer.fit()
