"""Ray speed-ups that reach into Ray's private API or the allocator, in one place.

Applied only on a Ray version they were tested on (`TESTED_RAY_VERSIONS`) and
unless ORCHESTRATOR_RAY_FAST_PATH=0; otherwise the stock path runs: a plain
`TorchTrainer`, and in a sweep Ray's own `TuneReportCallback`. What each piece
buys, measured in bench/notes/sweep_overhead.md (per trial) and
bench/notes/ray_overhead.md (per epoch):

- `_LeanTorchTrainer`: a sweep trial runs Ray Train's controller in its own
  process (9.5 -> 6.6 s a trial) and, on the embedded cluster, asks no
  autoscaler for workers (6.6 -> 6.3 s); no fit starts a dataset manager or
  waits for the placement-group cleaner to stop (11.0 -> 9.3 s), and a trial's
  process keeps one cleaner for all its fits (one process start and import
  less a trial).
- `reuse_trial_processes`: a trial's process runs the next (16.3 -> 13.2 s).
- `ReportToTune`: epochs reach Tune from the trial's thread, without Ray's
  queue actor; ASHA-stopped trials free their process (6.2 -> 5.6 s).
- the controller polls its workers every 0.5 s, not 2 s (19.2 -> 16.3 s).
- `embedded_init_kwargs`: room to start Train's helper actors beside the
  workers (9.3 -> 8.8 s).
- `job_env_vars`: no preemption watcher, one actor less beside the workers
  of each run (and no error line about its constructor arguments).
- `prepare_worker_process`: glibc keeps the memory a step frees (ray_overhead:
  the page faults that made epochs up to a third slower), and Ray Train's
  per-report log lines stay off the console.
- `light_usage_tags`: Tune tags a sweep's callbacks for Ray's usage statistics
  without importing mlflow and wandb to learn their class names (2 s of every
  sweep's driver on a 2-core CPU without AVX-512).
"""

import asyncio
import collections
import ctypes
import json
import logging
import os
import sys

import ray
from ray.train import UserCallback
from ray.train.torch import TorchTrainer

try:  # Ray Train's and Ray's usage tags' internals as laid out in the versions tested
    from ray._common.usage.usage_lib import TagKey, record_extra_usage_tag
    from ray.air._internal import usage as _air_usage
    from ray.train.v2._internal.callbacks import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback)
    from ray.train.v2._internal.execution import context as _train_context
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.controller.state import AbortedState
    from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy
    _INTERNALS_FOUND = True
except ImportError:  # another layout: enabled() is False and nothing below runs
    DatasetsCallback = PlacementGroupCleanerCallback = FixedScalingPolicy = object
    _INTERNALS_FOUND = False

TESTED_RAY_VERSIONS = ((2, 60),)
SWITCH_ENV_VAR = "ORCHESTRATOR_RAY_FAST_PATH"
# Set in the embedded cluster's job environment, which every process of the
# job reads: that cluster is this machine and nothing adds nodes to it.
FIXED_SIZE_ENV_VAR = "ORCHESTRATOR_FIXED_SIZE_CLUSTER"
HEALTH_CHECK_INTERVAL_S = "0.5"  # Ray's default: 2 s
PLACEMENT_GROUP_CHECK_INTERVAL_S = 5.0  # Ray's default: 1 s
# A live cleaner answers in milliseconds; one silent this long is taken as
# gone, and the fit starts a cleaner of its own.
CLEANER_ANSWER_TIMEOUT_S = 10.0
# The synchronization actor and the placement-group cleaner, started with the
# workers of every fit.
TRAIN_HELPER_ACTORS_PER_RUN = 2
# The trackers' Tune callbacks that Ray's usage tag counts by name (with Tune's
# default loggers): ray/air/_internal/usage.py's `_count_callbacks`, which imports
# each one's module (and so mlflow and wandb, where installed) to learn it.
TRACKER_CALLBACK_NAMES = ("WandbLoggerCallback", "MLflowLoggerCallback",
                          "CometLoggerCallback", "AimLoggerCallback")
# glibc's mallopt parameters (malloc.h) and a worker's values for them: the
# most glibc accepts, a trim threshold no heap reaches, and one whole heap
# (HEAP_MAX_SIZE on 64-bit) of top pad.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024
_TOP_PAD_BYTES = 64 * 1024 * 1024


def enabled(ray_version: str = ray.__version__) -> bool:
    """Whether the speed-ups apply: a tested Ray, and not switched off."""
    major_minor = tuple(int(part) for part in ray_version.split(".")[:2])
    return (_INTERNALS_FOUND and major_minor in TESTED_RAY_VERSIONS
            and os.environ.get(SWITCH_ENV_VAR) != "0")


def trainer_class() -> type[TorchTrainer]:
    return _LeanTorchTrainer if enabled() else TorchTrainer


def report_to_tune_callback() -> UserCallback:
    """The callback that forwards a Tune trial's epochs to Tune; call it in the trial."""
    if enabled():
        return ReportToTune()
    from ray.tune.integration.ray_train import TuneReportCallback
    return TuneReportCallback()


def reuse_trial_processes() -> bool:
    """Whether Tune runs a trial in the process of the one before: its start and torch
    import paid once. Only here, where a stopped trial's fit ends at once (ReportToTune):
    a stock fit outlived Tune's 2 s wait and the next trial failed (sweep_overhead.md)."""
    return enabled()


def job_env_vars(*, embedded: bool) -> dict[str, str]:
    """Environment for every process of the job; carries the switch to them all."""
    env_vars = {SWITCH_ENV_VAR: "1" if enabled() else "0"}
    if enabled():
        # Drains are Ray's advance notice of a preemption, which no loop of
        # ours reads: a preempted worker restarts from the last checkpoint
        # either way (see docs/CLUSTERS.md on the PreemptionWatcher line).
        env_vars["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] = os.environ.get(
            "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        if embedded:
            env_vars[FIXED_SIZE_ENV_VAR] = "1"
    return env_vars


def embedded_init_kwargs(num_cpus: int | None) -> dict:
    """Extra `ray.init` arguments for the embedded cluster.

    Ray starts one worker process per CPU at a time; on 2 CPUs the training
    workers queued behind Train's two helper actors: room for both beside them.
    """
    if not enabled():
        return {}
    concurrency = (num_cpus or os.cpu_count() or 1) + TRAIN_HELPER_ACTORS_PER_RUN
    return {"_system_config": {"worker_maximum_startup_concurrency": concurrency}}


def light_usage_tags() -> None:
    """In this process (a sweep's driver), Tune's usage tag of a run's callbacks
    is recorded as Ray records it, without the trackers' imports (`count_callbacks`)."""
    if enabled():
        _air_usage.tag_callbacks = _tag_callbacks


def _tag_callbacks(callbacks) -> bool:
    """Ray's `tag_callbacks` (whose value Tune ignores), its counts from
    `count_callbacks`."""
    if not callbacks:
        return False
    counts = count_callbacks(callbacks)
    if counts:
        record_extra_usage_tag(TagKey.AIR_CALLBACKS, json.dumps(counts))
    return bool(counts)


def count_callbacks(callbacks) -> dict[str, int]:
    """Ray's `_count_callbacks`: a run's callbacks by class name where Ray has
    them built in, else as a custom logger or callback; told by name alone."""
    from ray.tune import Callback
    from ray.tune.logger import LoggerCallback
    from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES
    built_in = {*TRACKER_CALLBACK_NAMES, *(cls.__name__ for cls in DEFAULT_CALLBACK_CLASSES)}
    counts = collections.Counter()
    for callback in callbacks:
        if not isinstance(callback, Callback):
            continue  # Tune refuses it later
        name = callback.__class__.__name__  # as Ray reads it
        if name in built_in:
            counts[name] += 1
        elif isinstance(callback, LoggerCallback):
            counts["CustomLoggerCallback"] += 1
        else:
            counts["CustomCallback"] += 1
    return dict(counts)


def prepare_worker_process() -> None:
    """Per training worker: keep freed memory (fast path), and quiet Ray's report lines."""
    if enabled():
        _keep_freed_memory_for_the_next_step()
    if _INTERNALS_FOUND:
        # Ray 2.60 names this logger by its file path, which our LoggingConfig
        # (it sets `ray.train.*`) misses: every report would be printed.
        logging.getLogger(_train_context.__file__).setLevel(logging.WARNING)


def _keep_freed_memory_for_the_next_step() -> None:
    """Have glibc keep the memory a step frees instead of handing it back.

    Ray Train's training thread allocates from a glibc arena whose heap was
    trimmed and regrown, or unmapped, every few steps; a worker's steps all
    need the same memory (bench/notes/ray_overhead.md). No-op off glibc.
    """
    if not sys.platform.startswith("linux"):
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
        mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)


class ReportToTune(UserCallback):
    """Each epoch's metrics to Tune, from the trial's own thread.

    Valid because `_LeanTorchTrainer` runs the controller in that thread:
    `tune.report` returns once Tune takes the result, and raises SystemExit
    when Tune stops the trial, which ends the fit there.
    """

    def after_report(self, run_context, metrics, checkpoint):
        from ray import tune
        from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY
        result = dict(metrics[0])  # rank 0's, the one that carries the checkpoint
        if checkpoint:
            # Where Ray's callback puts it: the checkpoint is stored already.
            result[CHECKPOINT_PATH_KEY] = checkpoint.path
        tune.report(result)


class _LeanTorchTrainer(TorchTrainer):
    """A TorchTrainer without the per-run helpers a run of ours never uses.

    Each helper is a process that imports Ray Train before it is ready, and on
    a 2-core machine their start-up, not training, was most of a short trial.
    """

    def _initialize_and_run_controller(self, **controller_init_kwargs):
        """Ray Train's controller, in this process when this process is an actor.

        A Tune trial already has Ray Train and torch imported, and a controller
        actor would share its fate anyway. A plain driver keeps Ray's actor,
        and with it Ray's graceful abort on Ctrl-C.
        """
        # Read by the controller, here or (propagated by Ray) in its actor.
        os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", HEALTH_CHECK_INTERVAL_S)
        if _is_fixed_size():
            controller_init_kwargs["scaling_policy"] = _NoAutoscalerScalingPolicy(
                self.scaling_config)
        if not _controller_runs_here():
            return super()._initialize_and_run_controller(**controller_init_kwargs)
        controller = TrainController(**controller_init_kwargs)
        try:
            asyncio.run(controller.run())
        except SystemExit:  # Tune stopped the trial in ReportToTune
            _abort_keeping_the_process(controller)
            raise
        return controller.get_result()

    def _create_default_callbacks(self):
        callbacks = []
        for callback in super()._create_default_callbacks():
            # Its actor only serves `ray.train.get_dataset_shard`; no run passes datasets.
            if isinstance(callback, DatasetsCallback) and not self.datasets:
                continue
            if type(callback) is PlacementGroupCleanerCallback:
                callback = _NonBlockingPlacementGroupCleaner(shared=_controller_runs_here())
            callbacks.append(callback)
        return callbacks


class _NonBlockingPlacementGroupCleaner(PlacementGroupCleanerCallback):
    """Ray Train's placement-group cleaner, checking less often, stopped without
    waiting, and one for all the fits of a trial's process.

    Worth keeping: a placement group outlives the actor that made it (Ray ties
    it to the job), so when a trial's process dies the cleaner frees its
    workers' group. But each check is a State API query beside the workers,
    and stopping it waited for its thread's sleep (the group is gone by then).
    And Ray starts a cleaner per fit: a process that imports Ray Train's state
    API (2-4 s on a 2-core CPU) beside the workers at every trial's start.
    Where the controller runs in the trial's process (`_LeanTorchTrainer`),
    which Tune reuses for the next trial, the cleaner watches that process:
    it stays for the next fit, which registers its group with it, and exits
    once the process has died and its last group is freed.
    """

    def __init__(self, *, shared: bool):
        """`shared`: the controller runs in this process, a trial's; else in an
        actor of its own, one per fit, and so is the cleaner, as Ray has it."""
        super().__init__(check_interval_s=PLACEMENT_GROUP_CHECK_INTERVAL_S)
        self._shared = shared

    def after_controller_start(self, train_run_context):
        global _process_cleaner
        if not self._shared:
            return super().after_controller_start(train_run_context)
        if _process_cleaner is not None and _answers(_process_cleaner):
            self._controller_actor_id = ray.get_runtime_context().get_actor_id()
            self._cleaner = _process_cleaner
        else:
            super().after_controller_start(train_run_context)
            _process_cleaner = self._cleaner

    def _stop_cleaner(self):
        if self._cleaner and not self._shared:
            self._cleaner.stop.remote()
        self._cleaner = None


# This process's placement-group cleaner, when it is a trial's (Tune reuses it).
_process_cleaner = None


def _answers(actor) -> bool:
    """Whether a cleaner still runs: it answers `start_monitoring` (a no-op while
    its watch runs) in time."""
    try:
        return ray.get(actor.start_monitoring.remote(), timeout=CLEANER_ANSWER_TIMEOUT_S)
    except Exception:
        return False


class _NoAutoscalerScalingPolicy(FixedScalingPolicy):
    """Ray Train's fixed-size policy, without asking an autoscaler for the workers.

    The request goes through a detached coordinator actor that the first fit
    waits for and that then wakes every 10 ms; the embedded cluster has no
    autoscaler to forward it to.
    """

    def after_controller_start(self, train_run_context):
        pass

    def _maybe_send_resource_request(self):
        pass


def _controller_runs_here() -> bool:
    """Whether a fit from this process runs Ray Train's controller in it: in an
    actor (a Tune trial's process), not in a plain driver (`_LeanTorchTrainer`)."""
    return ray.get_runtime_context().get_actor_id() is not None


def _is_fixed_size() -> bool:
    return ray.get_runtime_context().runtime_env.env_vars().get(FIXED_SIZE_ENV_VAR) == "1"


def _abort_keeping_the_process(controller: "TrainController") -> None:
    """Ray's `TrainController.abort` without its `exit_actor`: the workers and
    their placement group go, the trial's process stays for Tune's next trial."""
    controller._controller_callback_manager.invoke_best_effort("before_controller_abort")
    if controller.get_worker_group():
        controller.get_worker_group().abort()
    controller._set_state(AbortedState())
