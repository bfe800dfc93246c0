"""Benchmark: how `ddp` clears its gradients between steps, in place or to None.

DDP (`gradient_as_bucket_view`) keeps each gradient as a view of its bucket.
A gradient set to None after a step comes back from the next backward as a new
tensor, which DDP's reducer copies into the bucket, every gradient at every
step; cleared in place, backward writes straight into the bucket. The sync
(`DDPSync.zero_grad`) clears in place; this times that against the same
strategy clearing to None, alternately in one process (a one-worker group:
gloo on a CPU, NCCL on a GPU; the reducer copies all the same), on the book's
ResNet-18 at one batch, each round in the other order, and checks both reach
the same parameters bitwise. Figures: `in_place_step_ms` and
`to_none_step_ms`, the median step of each (forward, backward with DDP's
reduction, SGD with momentum, the clearing); `speedup` their ratio (> 1: in
place is faster); `same_parameters`.

    python bench/ddp_clear.py [--device cuda] [--rounds 6 --steps 10 --batch-size 64]
                              [--out DIR]   # DIR: a lent GPU's files
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, free_port, median  # noqa: E402

from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training import recipe  # noqa: E402
from orchestrator.training.models import build_model  # noqa: E402
from orchestrator.training.step import forward_backward  # noqa: E402
from orchestrator.training.sync.strategies import DDPSync  # noqa: E402


class ToNoneSync(DDPSync):
    """`ddp` clearing its gradients as the other per-tensor strategies do: to None."""

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and arm")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    parser.add_argument("--out", help="write the record here instead (a lent GPU's files)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=120))
    try:
        config = TrainConfig(model="resnet18", num_workers=1, global_batch_size=args.batch_size,
                             lr=0.05, momentum=0.9, memory_format="nchw")
        generator = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (args.batch_size, 28, 28), dtype=torch.uint8,
                               generator=generator).to(device)
        labels = torch.randint(0, 10, (args.batch_size,), generator=generator).to(device)
        arms = {}
        for name, sync_class in (("in_place", DDPSync), ("to_none", ToNoneSync)):
            model = build_model("resnet18", seed=0).to(device)
            sync = sync_class(model, device, bucket_cap_mb=config.bucket_cap_mb)
            arms[name] = (model, sync, recipe.make_optimizer(model.parameters(), config))

        def steps(name: str, count: int) -> list[float]:
            _, sync, optimizer = arms[name]
            times = []
            for _ in range(count):
                started = time.perf_counter()
                forward_backward(sync.module, images, labels, config)
                sync.step(optimizer)
                sync.zero_grad()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - started)
            return times

        for name in arms:  # the first backward makes the buckets' views: untimed
            steps(name, 2)
        timed = {name: [] for name in arms}
        for round_index in range(args.rounds):
            order = list(arms) if round_index % 2 == 0 else list(arms)[::-1]
            for name in order:
                timed[name] += steps(name, args.steps)
        pairs = list(zip(arms["in_place"][0].parameters(), arms["to_none"][0].parameters()))
        same = all(torch.equal(a, b) for a, b in pairs)
        # cuDNN's default algorithms need not be deterministic: a difference of
        # rounding's size is theirs, not a clearing's.
        largest = max(float((a - b).detach().abs().max()) for a, b in pairs)
    finally:
        dist.destroy_process_group()
    in_place, to_none = (median(timed[name]) * 1e3 for name in ("in_place", "to_none"))
    emit("ddp_clear", command_line(), {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "batch_size": args.batch_size, "rounds": args.rounds, "steps": args.steps,
        "in_place_step_ms": round(in_place, 3), "to_none_step_ms": round(to_none, 3),
        "speedup": round(to_none / in_place, 4), "same_parameters": same,
        "largest_parameter_difference": largest},
        append=not args.no_append, out=args.out)


if __name__ == "__main__":
    main()
