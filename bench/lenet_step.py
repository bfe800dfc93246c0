"""Benchmark: LeNet's training step on one CPU core, and the floor it sets for a sweep.

Times the step a worker runs (forward, the loss, backward, SGD; the worker
loop's own `forward_backward`, step.py) on one thread, with glibc keeping freed memory
as a worker's does (without, every step faults in its activations afresh: 80
ms a step where a worker takes 60 on the 2-core EPYC), at batch 256 in the
layout the product chose here (channels-last on a CPU with AVX-512), for two builds of
the same LeNet alternately, each round in the other order: as built
(`models.lenet`, its ReLUs in place) and with every ReLU copying its output.
Figures:
- `step_ms` and `copying_step_ms`: the median step of each; `inplace_speedup`
  their ratio (> 1: in place is faster); both reach the same parameters,
  checked bitwise after the timed steps.
- `conv_share`, `conv_gflops`: the convolutions' share of the step (torch's
  profiler, self time) and their rate; `gemm_gflops`: the same core's rate on a
  1024x1024 fp32 matrix product, the best dense rate it gives torch. A
  convolution rate near it leaves only the rest of the step to gain.
- `floor_min`: every LeNet training example of a recorded sweep (`--sweep`,
  by default the full exercises example) at this step's cost per example, on
  all the machine's cores at once with no sync, evaluation or start: no
  schedule of that sweep's trials on this machine takes less.

    python bench/lenet_step.py [--rounds 10 --steps 20 --sweep docs/examples/exercises-2core]
"""

import argparse
import copy
import os
import sys
import time

import pandas as pd
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from common import REPO, command_line, emit, median  # noqa: E402

from orchestrator import ray_fastpath  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training import layout, recipe  # noqa: E402
from orchestrator.training.models import lenet  # noqa: E402
from orchestrator.training.step import forward_backward  # noqa: E402

DEFAULT_SWEEP = REPO / "docs" / "examples" / "exercises-2core"
IMAGE = 28


def conv_flops(batch: int) -> float:
    """Floating-point operations of LeNet's two convolutions in one step on 28x28
    images: forward, and backward's weight gradient for both and input gradient
    for the second (the images need none), 2 per multiply-add."""
    first = batch * 20 * 26 * 26 * (1 * 3 * 3) * 2
    second = batch * 50 * 11 * 11 * (20 * 5 * 5) * 2
    return 2 * first + 3 * second


def copying(model: nn.Module) -> nn.Module:
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return twin


def gemm_gflops(size: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size ** 3 * repeats / (time.perf_counter() - started) / 1e9


def lenet_examples(sweep_dir) -> int:
    """LeNet training examples a recorded sweep's trials went through."""
    trials = pd.read_csv(sweep_dir / "trials.csv")
    lenet_trials = trials[trials["model"] == "lenet"]
    return int((lenet_trials["epochs_run"] * lenet_trials["epoch_examples"]).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round and build")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--memory-format", choices=("channels-last", "nchw"),
                        default="channels-last")
    # Relative to the repository; an absolute path replaces it (pathlib's join).
    parser.add_argument("--sweep", type=lambda text: REPO / text, default=DEFAULT_SWEEP,
                        help="a recorded sweep whose LeNet examples the floor counts")
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray_fastpath._keep_freed_memory_for_the_next_step()  # as in every worker
    config = TrainConfig(model="lenet", num_workers=1, global_batch_size=args.batch_size,
                         lr=0.1, memory_format=args.memory_format)
    fmt = layout.TORCH_FORMATS[args.memory_format]
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch_size, IMAGE, IMAGE), dtype=torch.uint8,
                           generator=generator)
    labels = torch.randint(0, 10, (args.batch_size,), generator=generator)
    built = lenet().to(memory_format=fmt)
    models = {"inplace": built, "copying": copying(built)}
    optimizers = {name: recipe.make_optimizer(model.parameters(), config)
                  for name, model in models.items()}

    def step(name: str) -> None:
        forward_backward(models[name], images, labels, config)
        optimizers[name].step()
        optimizers[name].zero_grad()

    for name in models:
        for _ in range(5):
            step(name)
    step_s: dict[str, list[float]] = {name: [] for name in models}
    for round_index in range(args.rounds):
        for name in models if round_index % 2 == 0 else reversed(models):
            started = time.perf_counter()
            for _ in range(args.steps):
                step(name)
            step_s[name].append((time.perf_counter() - started) / args.steps)
    same = all(torch.equal(a, b) for a, b in zip(models["inplace"].parameters(),
                                                  models["copying"].parameters()))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(args.steps):
            step("inplace")
    events = profile.key_averages()
    total_us = sum(event.self_cpu_time_total for event in events)
    conv_us = sum(event.self_cpu_time_total for event in events
                  if event.key in ("aten::mkldnn_convolution", "aten::convolution_backward",
                                   "aten::_convolution", "aten::thnn_conv2d"))
    conv_s_per_step = conv_us / 1e6 / args.steps
    step_median = median(step_s["inplace"])
    examples = lenet_examples(args.sweep) if (args.sweep / "trials.csv").is_file() else None
    cores = os.cpu_count() or 1
    figures = {
        "batch_size": args.batch_size, "memory_format": args.memory_format,
        "step_ms": round(step_median * 1e3, 2),
        "copying_step_ms": round(median(step_s["copying"]) * 1e3, 2),
        "inplace_speedup": round(median(step_s["copying"]) / step_median, 3),
        "same_parameters": same,
        "conv_share": round(conv_us / total_us, 3),
        "conv_gflops": round(conv_flops(args.batch_size) / conv_s_per_step / 1e9, 1),
        "gemm_gflops": round(gemm_gflops(), 1),
        "sweep": os.path.relpath(args.sweep, REPO) if examples else None,
        "sweep_lenet_examples": examples,
        "floor_min": (round(examples / args.batch_size * step_median / cores / 60, 1)
                      if examples else None),
        "rounds": args.rounds, "steps": args.steps,
    }
    emit("lenet_step", command_line(), figures, append=not args.no_append)


if __name__ == "__main__":
    main()
