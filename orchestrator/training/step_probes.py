"""How fast a worker's forward and backward run, for the sweep's calibration
(calibration.py): how much workers that compute at once slow each other
(`compute_probe`), and the part of a GPU step no smaller shard saves
(`fixed_step_probe`). Every worker of the group calls them; rank 0's figures are
kept.
"""

import dataclasses
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F

from orchestrator.config.options import TrainConfig
from orchestrator.training.layout import TORCH_FORMATS
from orchestrator.training.recipe import model_of, set_cudnn
from orchestrator.training.step import PARAMETER_DTYPES, forward_backward, to_model_input
from orchestrator.training.sync.collectives import allreduce_, get_rank, get_world_size

# Each worker count computes for about this long per round (one step at least), in
# rounds that alternate the counts: their sum follows a shared node's contention as
# a trial's epoch sums it (one 0.5 s run gave 1.05 to 1.20 on 2 vCPUs). Up to
# COMPUTE_ROUNDS rounds, fewer (2 at least) where a model's steps would take longer
# than COMPUTE_BUDGET_S in all (ResNet-18's CPU step of 256 examples takes seconds).
COMPUTE_PROBE_S = 0.3
COMPUTE_ROUNDS = 10
COMPUTE_BUDGET_S = 30.0
# On a GPU a step is not only arithmetic: launched kernel by kernel, LeNet's step
# took 2.2 ms on an H200 for a few microseconds of it, and ResNet-18's 9-11 ms at
# batch 256 and 15 ms at 1024, four times the examples in 1.7 times the time (issue
# 38, bench/notes/gpu_step.md). So one worker's step is
# timed at the probe's batch and at half of it, FIXED_ROUNDS rounds each, taking
# turns: seconds = fixed + per example * shard, whose fixed part a shard k times
# smaller does not shrink (`fixed_step_probe`; report/scaling_model.py). Timed as
# the trials step: their forward and backward (step.forward_backward), in each
# precision the sweep trains the model in and each memory layout `auto` may take,
# cuDNN's autotuner on; the scaling model reads the entry of a baseline's own.
FIXED_ROUNDS = 5
FIXED_PROBE_S = 0.1


def train_step(model, config: TrainConfig, device: torch.device, batch_per_worker: int):
    """One forward and backward of `model` on random images of the run's shape (its
    time does not depend on their values), as a callable."""
    images = torch.randint(0, 256, (batch_per_worker, *config.input_shape), dtype=torch.uint8)
    x = to_model_input(images).to(device)
    labels = torch.randint(0, config.num_classes, (batch_per_worker,), device=device)

    def step():
        F.cross_entropy(model(x), labels).backward()
    return step


def compute_probe(model, config: TrainConfig, device: torch.device,
                  worker_counts: tuple[int, ...], batch_per_worker: int, *,
                  name: str) -> list[dict]:
    """Seconds per example of forward and backward when the first j workers compute
    at once, for each j; the others wait at a barrier meanwhile. Random images of
    the run's shape: the time does not depend on their values. Each rank's seconds
    are summed over the rounds and the slowest rank's sum is read, as a trial's
    epoch sums each rank's compute and waits for the slowest (a maximum taken
    round by round would read each short round's worst jitter)."""
    step = train_step(model, config, device, batch_per_worker)
    for _ in range(2):
        step()
    counts = [count for count in sorted(set(worker_counts)) if count <= get_world_size()]
    steps, num_rounds = _steps_for(step, device, len(counts))
    totals = {count: torch.zeros(get_world_size(), dtype=torch.float64, device=device)
              for count in counts}
    for _ in range(num_rounds):
        for count in counts:
            barrier()
            seconds = torch.zeros(get_world_size(), dtype=torch.float64, device=device)
            if get_rank() < count:
                synchronize(device)
                started = time.perf_counter()
                for _ in range(steps):
                    step()
                synchronize(device)
                seconds[get_rank()] = time.perf_counter() - started
            # Every rank's time, for the slowest of the busy ones. The computing
            # ranks wait as a training step's sync does (busily: a rank done first
            # spins while the slowest finishes, as in a trial); the others block,
            # leaving the CPU to those computing. Had they spun too, on a node with
            # fewer cores than workers the 1-worker round ran 2.4x slower and hid
            # the contention of the others (1.12x read at 4 workers on 2 cores).
            if get_rank() < count:
                allreduce_(seconds)
            elif dist.is_initialized():
                dist.all_reduce(seconds)
            totals[count] += seconds
    return [{"num_workers": count, "model": name, "batch_per_worker": batch_per_worker,
             "rounds": num_rounds, "steps_per_round": steps,
             "seconds_per_example": totals[count].max().item()
             / (num_rounds * steps * batch_per_worker)} for count in counts]


def fixed_step_probe(config: TrainConfig, device: torch.device, batch_per_worker: int, *,
                     name: str, precision: str, memory_format: str) -> dict | None:
    """One worker's forward and backward seconds a step of model `name`, in `precision`
    and `memory_format`, at `batch_per_worker` and at half of it, timed on rank 0
    alone (the others wait at a barrier, as the compute probe's 1-worker rounds do)
    in FIXED_ROUNDS rounds that take turns, each of about FIXED_PROBE_S: their
    medians fit `seconds = fixed + per example * shard` through both, "fixed_s" the
    part no smaller shard saves (0 to the half batch's seconds: a half batch timed
    slower than the whole reads as all fixed). Rank 0's dict; None on the others
    (whose results are not kept)."""
    half = batch_per_worker // 2
    barrier()
    figures = None
    if get_rank() == 0:
        steps_of = {size: _shaped_step(config, device, size, name=name, precision=precision,
                                       memory_format=memory_format)
                    for size in (batch_per_worker, half)}
        for step in steps_of.values():
            for _ in range(2):
                step()
        synchronize(device)
        started = time.perf_counter()
        steps_of[batch_per_worker]()
        synchronize(device)
        repeats = max(1, round(FIXED_PROBE_S / (time.perf_counter() - started)))
        seconds: dict[int, list[float]] = {size: [] for size in steps_of}
        for _ in range(FIXED_ROUNDS):
            for size, step in steps_of.items():
                synchronize(device)
                started = time.perf_counter()
                for _ in range(repeats):
                    step()
                synchronize(device)
                seconds[size].append((time.perf_counter() - started) / repeats)
        full_s, half_s = (statistics.median(seconds[size]) for size in (batch_per_worker, half))
        # Through (half, half_s) and (batch, full_s): fixed = half_s - half * slope.
        slope = (full_s - half_s) / (batch_per_worker - half)
        figures = {"model": name, "precision": precision, "memory_format": memory_format,
                   "batch_per_worker": batch_per_worker, "half_batch": half,
                   "full_s": full_s, "half_s": half_s,
                   "fixed_s": min(max(0.0, half_s - half * slope), half_s),
                   "rounds": FIXED_ROUNDS, "steps_per_round": repeats}
    barrier()
    return figures


def _shaped_step(config: TrainConfig, device: torch.device, batch_per_worker: int, *,
                 name: str, precision: str, memory_format: str):
    """One forward and backward of a fresh `name` on random images, as a trial in
    `precision` and `memory_format` steps (step.forward_backward), as a callable."""
    shaped = dataclasses.replace(config, model=name, precision=precision,
                                 memory_format=memory_format)
    model = model_of(shaped).to(device, PARAMETER_DTYPES[precision]).to(
        memory_format=TORCH_FORMATS[memory_format])
    images = torch.randint(0, 256, (batch_per_worker, *config.input_shape), dtype=torch.uint8,
                           device=device)
    labels = torch.randint(0, config.num_classes, (batch_per_worker,), device=device)
    if device.type == "cuda":
        set_cudnn(config)  # as every GPU trial runs
    return lambda: forward_backward(model, images, labels, shaped)


def _steps_for(step, device: torch.device, num_counts: int) -> tuple[int, int]:
    """(steps a round, rounds): steps that take about COMPUTE_PROBE_S on rank 0 (one at
    least), and as many of COMPUTE_ROUNDS rounds as COMPUTE_BUDGET_S holds (two at
    least); agreed by every worker."""
    synchronize(device)
    started = time.perf_counter()
    step()
    synchronize(device)
    step_s = time.perf_counter() - started
    steps = max(1, round(COMPUTE_PROBE_S / step_s))
    rounds = max(2, min(COMPUTE_ROUNDS, int(COMPUTE_BUDGET_S / (num_counts * steps * step_s))))
    agreed = torch.tensor([steps, rounds], device=device)
    if dist.is_initialized():
        dist.broadcast(agreed, src=0)
    return int(agreed[0]), int(agreed[1])


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
