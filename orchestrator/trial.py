"""One training run: a TorchTrainer of `config.num_workers` workers, fitted.

This is the per-trial driver. `experiments/train.py` calls it once; each
Ray Tune trial of the sweep calls it with a `TuneReportCallback`.
"""

import os
from collections.abc import Sequence

import ray
from ray.train import (CheckpointConfig, FailureConfig, LoggingConfig, RunConfig,
                       ScalingConfig, UserCallback)
from ray.train.torch import TorchConfig, TorchTrainer

from orchestrator.config import TrainConfig
from orchestrator.worker import train_loop_per_worker

DEFAULT_MAX_FAILURES = 2
# How often Ray Train's controller polls its workers (Ray's default: 2 s). The
# poll is what notices that training ended or a worker died, so every run
# waited a second on average for it at its end; a poll is one small remote
# call per worker.
HEALTH_CHECK_INTERVAL_S = "0.5"


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
    trainer = TorchTrainer(
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
