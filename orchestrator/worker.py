"""The Ray Train entry point: what runs on each worker around the loop of loop.py.

`train_loop_per_worker` takes the config and the data from the driver,
resumes from Ray's checkpoint, and reports each epoch to Ray Train with a
checkpoint; the loop itself (`orchestrator.loop.run_training`) needs no Ray.
"""

import ctypes
import logging
import sys
import tempfile
from pathlib import Path

import ray
import ray.train
import ray.train.torch
import torch

from orchestrator.collectives import get_rank
from orchestrator.config import TrainConfig
from orchestrator.data import FashionMNIST
from orchestrator.checkpoint import load_checkpoint, save_checkpoint
from orchestrator.loop import run_training

# glibc's mallopt parameters (malloc.h) and the values a worker sets them to.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
# The most glibc accepts, and the ceiling of its own dynamic threshold.
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024
# The size of one heap of a thread's arena (HEAP_MAX_SIZE on 64-bit glibc).
_TOP_PAD_BYTES = 64 * 1024 * 1024


def train_loop_per_worker(loop_config: dict) -> list[dict]:
    """Ray Train entry point: config and data come from the driver via the object store."""
    config = TrainConfig(**loop_config["train_config"])
    torch.set_num_threads(config.threads_per_worker)
    _keep_freed_memory_for_the_next_step()
    _quiet_report_lines()
    data: FashionMNIST = ray.get(loop_config["data"])
    checkpoint = ray.train.get_checkpoint()
    resume_from = None
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            resume_from = load_checkpoint(Path(folder))
    return run_training(config, data, device=ray.train.torch.get_device(),
                        report=report_to_ray, resume_from=resume_from)


def _keep_freed_memory_for_the_next_step() -> None:
    """Have glibc keep the memory a step frees, instead of handing it back.

    Ray Train runs the training function in a thread of its own, which
    allocates from one of glibc's per-thread arenas. In a Ray worker that
    arena's heap was cut back (`madvise`) and regrown (`mprotect`) every few
    steps: up to 100,000 page faults a second, each a fresh zeroed page, where
    a torchrun process had under 100. The epoch took up to a third longer
    (bench/notes/ray_overhead.md). A worker's steps all need the same memory,
    so it keeps it: a trim threshold the heap never reaches, and a fixed
    threshold for taking big blocks straight from the kernel (setting one
    turns off glibc's adjustment of the other).

    The trim threshold does not cover all of it. A thread's arena grows in
    heaps of 64 MB, and glibc unmaps a heap that has become wholly free
    whatever the threshold, unless the heap before it lacks room for the top
    pad. A step that spans two heaps (a 1-worker LeNet step on a batch of
    256 does) can then map and fault a fresh one every step: epochs of 20 s
    against 14, up to 180,000 faults a second. A pad of a whole heap keeps
    every heap. The pad is address space, not memory: pages are only
    resident once touched. No-op off glibc.
    """
    if not sys.platform.startswith("linux"):
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
        mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)


def _quiet_report_lines() -> None:
    """Keep Ray Train's "Reporting training result ..." lines off the console.

    Ray 2.60 names that logger by its file path (`getLogger(__file__)`), so
    the WARNING level of our LoggingConfig, which applies to `ray.train.*`
    loggers, misses it and every worker prints every report, metrics and all.
    """
    try:
        from ray.train.v2._internal.execution import context as train_context
    except ImportError:  # a Ray whose layout differs: nothing to correct
        return
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)


def report_to_ray(metrics: dict, state: dict, history: list[dict]) -> None:
    """Report to Ray Train with an epoch checkpoint from rank 0.

    Ray Train V2 keeps only metrics that come with a checkpoint, and the
    checkpoint is also what a restarted worker group resumes from.
    """
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if get_rank() == 0:
            save_checkpoint(Path(folder), state, history)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=checkpoint)
