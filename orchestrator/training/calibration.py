"""The sweep's microbenchmark, run on the cluster before its trials: what one
gradient sum costs per call and per byte on each transport the strategies use,
and how much workers that compute at once slow each other (on a CPU node they
share memory bandwidth); and, for each model the sweep trains, the bytes each
strategy sums per step, so that the report needs no model to count them (the
compute's probes are step_probes.py's). The scaling model
(report/scaling_model.py) is fitted from it; it is kept as calibration.json
beside the results.
"""

import dataclasses
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from orchestrator.training.sync.collectives import (all_gather_, allreduce_, get_rank,
                                                    get_world_size, reduce_scatter_)
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import SweepConfig
from orchestrator.records import SHARDED_PAIR, SHARED_MEMORY_SYNCS
from orchestrator.training.recipe import model_of
from orchestrator.training.step import PARAMETER_DTYPES
from orchestrator.training.step_probes import (compute_probe, fixed_step_probe, synchronize,
                                               train_step)
from orchestrator.training.models import INPUT_SHAPE, NUM_CLASSES, build_model
from orchestrator.training.sync.base import (buckets, group_transport, make_transport, nbytes,
                                             root_transport)

SMALLEST_BYTES = 1024
LARGEST_BYTES = 64 * 1024 * 1024
REPEATS = 9
# A step's first sum comes right after its backward, whose data have pushed the
# transport's out of the caches (and its threads to sleep): on this project's 2-core
# Xeon LeNet's 8 sums took 0.51-0.57 ms a step back to back, 1.05-1.35 ms right after
# a backward. Each size is also timed so, FIRST_CALL_REPEATS times, each call after a
# forward and backward of the run's model (docs/SCALING_MODEL.md).
FIRST_CALL_REPEATS = 5


def measure(config: TrainConfig, device: torch.device, *, worker_counts: tuple[int, ...],
            transports: tuple[str, ...], layouts: tuple[tuple[str, str, float], ...],
            sharded: bool = False, probes: tuple[tuple[str, int], ...] = ()) -> dict:
    """The microbenchmark on this worker group (every worker calls it); rank 0's
    result is the one kept. `transports`: "shared memory", "group" and/or "root" (the
    book's allreduce through worker 0);
    `sharded`: also the group's reduce-scatter and all-gather, as `sharded` calls them;
    `layouts`: the (model, precision, bucket_cap_mb) whose gradient bytes to record;
    `probes`: the (model, batch per worker) whose contention to probe (`probes_of`);
    none: the run's own model at its global batch over the most workers.
    Each collective is timed at each size back to back ("allreduce") and as a step's
    first sum, right after a forward and backward of the run's model at the first
    probe's batch ("first_call")."""
    model = model_of(config).to(device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    layout_bytes = layouts_bytes(layouts, config)
    largest_bytes = largest_message(param_bytes, layout_bytes)
    collectives = {}
    for kind in transports if get_world_size() > 1 else ():
        transport = {"shared memory": lambda: make_transport(device, largest_bytes,
                                                             shared_memory=True),
                     "group": group_transport, "root": root_transport}[kind]()
        collectives[transport.name] = transport.allreduce_
    if sharded and get_world_size() > 1:
        collectives[f"{group_transport().name} {SHARDED_PAIR}"] = _reduce_scatter_all_gather
    probes = probes or ((config.model, max(1, config.global_batch_size // max(worker_counts)
                                           // config.accumulation_steps)),)
    after_backward = train_step(model, config, device, probes[0][1]) if collectives else None
    samples, first_calls = [], []
    for name, collective in collectives.items():
        for size in _sizes(largest_bytes):
            sample = {"transport": name, "num_workers": get_world_size(), "bytes": size}
            samples.append({**sample, "seconds": _collective_s(collective, size, device)})
            first_calls.append({**sample, "seconds": _first_call_s(collective, size, device,
                                                                   after_backward)})
    return {"num_workers": get_world_size(), "device": device.type,
            "processor": processor(device), "model": config.model,
            "threads_per_worker": config.threads_per_worker, "allreduce": samples,
            "first_call": first_calls,
            "compute": [sample for name, batch_per_worker in probes
                        for sample in compute_probe(
                            model if name == config.model else
                            model_of(dataclasses.replace(config, model=name)).to(device),
                            config, device, worker_counts, batch_per_worker, name=name)],
            "gradient_bytes": layout_bytes,
            "step_fixed": [fixed_step_probe(config, device, batch_per_worker, name=name,
                                            precision=precision, memory_format=layout)
                           for name, batch_per_worker in probes
                           if device.type == "cuda" and batch_per_worker > 1
                           for precision in dict.fromkeys(
                               [p for m, p, _ in layouts if m == name] or [config.precision])
                           for layout in (("nchw", "channels-last")
                                          if config.memory_format == "auto"
                                          else (config.memory_format,))]}


def counted_alone(sweep: SweepConfig) -> dict:
    """The calibration of a sweep whose trials each run on one worker, where the
    points the cluster cannot hold are estimated (report/what_if.py): their
    gradient bytes alone, counted here from the models built on the CPU (bytes do not
    depend on the device), with no worker group to start. One worker sums nothing and
    contends with no one: the allreduce and the probes have nothing to time, and the
    scaling model's fit needs two workers' samples all the same."""
    base = sweep.base
    return {"num_workers": 1, "device": "cuda" if base.use_gpu else "cpu",
            "model": base.model, "threads_per_worker": base.threads_per_worker,
            "allreduce": [], "first_call": [], "compute": [],
            "gradient_bytes": layouts_bytes(layouts_of(sweep), base),
            "counted_alone": True}


def processor(device: torch.device) -> str:
    """What computes, for the record: the GPU's name, or the node's cores, the CPU's
    model and the kernels torch runs on it (AVX512, AVX2, ...: a CPU without AVX-512
    trains LeNet several times slower per core, and ATEN_CPU_CAPABILITY can cap torch
    below what the CPU has)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("model name")), platform.machine())
    kernels = torch.backends.cpu.get_cpu_capability()
    return f"{os.cpu_count()} cores, {model}, torch's {kernels} kernels"


def transports_of(sweep: SweepConfig) -> tuple[str, ...]:
    """Which transports the sweep's trials sum their gradients over."""
    node_memory = (not sweep.base.use_gpu and sweep.base.shared_memory
                   and bool(set(SHARED_MEMORY_SYNCS) & set(sweep.sync)))
    return (("shared memory",) if node_memory else ()) + ("group",) + (
        ("root",) if "root" in sweep.sync else ())


def probes_of(sweep: SweepConfig) -> tuple[tuple[str, int], ...]:
    """(model, batch per worker) for each model the sweep trains on several workers,
    at the batch per worker most of those trials take (the smaller on a tie): the
    contention the scaling model reads is probed on that work, not on another
    model's. () for a sweep of single workers (the run's own model is probed)."""
    batches: dict[str, list[int]] = {}
    for point in sweep.grid:
        if point.train.num_workers > 1:
            # A micro-batch with --accumulation-steps: what one forward and backward holds.
            batches.setdefault(point.train.model, []).append(
                point.train.micro_batch_size_per_worker)
    return tuple((model, min(set(sizes), key=lambda size: (-sizes.count(size), size)))
                 for model, sizes in batches.items())


def layouts_of(sweep: SweepConfig) -> tuple[tuple[str, str, float], ...]:
    """Each (model, precision, bucket_cap_mb) of the sweep's trials, once."""
    return tuple(dict.fromkeys((point.train.model, point.train.precision,
                                point.train.bucket_cap_mb) for point in sweep.grid))


def layouts_bytes(layouts: tuple[tuple[str, str, float], ...], config: TrainConfig) -> list[dict]:
    """`gradient_bytes` of each (model, precision, bucket_cap_mb), for the models as
    `config`'s data set shapes them: what a worker group's calibration records and
    what the driver counts alone."""
    return [gradient_bytes(*layout, num_classes=config.num_classes,
                           input_shape=config.input_shape) for layout in layouts]


def gradient_bytes(model: str, precision: str, bucket_cap_mb: float, *,
                   num_classes: int = NUM_CLASSES,
                   input_shape: tuple[int, ...] = INPUT_SHAPE) -> dict:
    """What one step's sync sends, as the strategies lay it out: one message per
    parameter tensor (scratch), one per bucket of at most `bucket_cap_mb` (bucketed,
    ddp); sharded's flat buffer is their sum. The model as the run's data set
    shapes it (its classes, its images)."""
    built = build_model(model, seed=0, num_classes=num_classes,
                        input_shape=input_shape).to(PARAMETER_DTYPES[precision])
    return {"model": model, "precision": precision, "bucket_cap_mb": bucket_cap_mb,
            "tensor_bytes": [nbytes(p) for p in built.parameters() if p.requires_grad],
            "bucket_bytes": [sum(map(nbytes, bucket)) for bucket in buckets(built, bucket_cap_mb)]}


def largest_message(param_bytes: int, layouts: list[dict]) -> int:
    """The largest size the transports are timed at: 4x the largest gradient any of
    the sweep's models sums (`layouts`, as `gradient_bytes` gives them) or the probed
    model's, at most LARGEST_BYTES. ResNet-18's 44.7 MB in the exercises, whose
    probe runs LeNet, so the bandwidth its messages meet beyond the caches is
    measured, not read from LeNet's 1 MB, which stays in them."""
    return min(LARGEST_BYTES, 4 * max([param_bytes] + [sum(layout["tensor_bytes"])
                                                        for layout in layouts]))


def _sizes(largest_bytes: int) -> list[int]:
    """1 KB, 4 KB, ... up to the largest: the latency end and the bandwidth end."""
    sizes = [SMALLEST_BYTES]
    while sizes[-1] * 4 <= largest_bytes:
        sizes.append(sizes[-1] * 4)
    return sizes


def _reduce_scatter_all_gather(flat: torch.Tensor) -> None:
    reduce_scatter_(flat)
    all_gather_(flat)


def _message(nbytes: int, device: torch.device) -> torch.Tensor:
    """`nbytes` of float32 ones, a multiple of the workers in elements."""
    numel = nbytes // 4 - nbytes // 4 % get_world_size()
    return torch.ones(numel, dtype=torch.float32, device=device)


def _collective_s(collective, nbytes: int, device: torch.device) -> float:
    """Median seconds of one call of an in-place collective on `nbytes` of float32,
    a multiple of the workers in elements."""
    tensor = _message(nbytes, device)
    seconds = []
    for repeat in range(REPEATS + 2):  # two to warm up
        synchronize(device)
        started = time.perf_counter()
        collective(tensor)
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds[2:])


def _first_call_s(collective, nbytes: int, device: torch.device, after_backward) -> float:
    """Median seconds of one call made as a step's first sum is: right after a forward
    and backward (`after_backward`) on every worker. A call's time on a worker that
    arrived first holds its wait for the others; the one that arrived last waits for
    no one, so each call counts the least any worker took (as a trial's
    `sync_least_s` counts its steps), read once all are made."""
    tensor = _message(nbytes, device)
    seconds = torch.zeros(FIRST_CALL_REPEATS + 1, get_world_size(), dtype=torch.float64)
    for repeat in range(FIRST_CALL_REPEATS + 1):  # the first to warm up
        after_backward()
        synchronize(device)
        started = time.perf_counter()
        collective(tensor)
        synchronize(device)
        seconds[repeat, get_rank()] = time.perf_counter() - started
    summed = allreduce_(seconds.to(device)).cpu()  # each worker's column; zeros elsewhere
    return statistics.median(summed[1:].min(dim=1).values.tolist())


