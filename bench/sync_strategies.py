"""Benchmark 3: time in gradient communication per step, for each sync strategy.

Two gloo processes (one thread each) reduce LeNet's and ResNet-18's gradient
sets with `scratch` and `bucketed`, and measure gloo's own bus bandwidth on a
large message in the same run. For `ddp`, the share of communication hidden
behind backward is 1 - (DDP step - local step) / bucketed reduction time.

    python bench/sync_strategies.py [--repeats 20]
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.models import build_model  # noqa: E402
from orchestrator.sync import BucketedSync, DDPSync, ScratchSync  # noqa: E402

WORLD_SIZE = 2
LARGE_MESSAGE_BYTES = 64 * 1024 * 1024
BATCH_PER_WORKER = {"lenet": 128, "resnet18": 16}


def bus_bandwidth_mb_s(num_bytes: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth: what each link carries in a ring allreduce."""
    return 2 * (WORLD_SIZE - 1) / WORLD_SIZE * num_bytes / seconds / 1e6


def _timed(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return median(times)


def _worker(rank: int, port: int, repeats: int, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD_SIZE)
    cpu = torch.device("cpu")
    large = torch.ones(LARGE_MESSAGE_BYTES // 4)
    gloo_s = _timed(lambda: dist.all_reduce(large), max(3, repeats // 4))
    results = {"gloo_busbw_MB_s": bus_bandwidth_mb_s(LARGE_MESSAGE_BYTES, gloo_s)}
    for name in ("lenet", "resnet18"):
        model = build_model(name, seed=0)
        x = torch.rand(BATCH_PER_WORKER[name], 1, 28, 28)
        y = torch.randint(0, 10, (BATCH_PER_WORKER[name],))

        def local_step(module):
            module.zero_grad(set_to_none=True)
            F.cross_entropy(module(x), y).backward()

        local_step(model)
        grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
        scratch, bucketed = ScratchSync(model, cpu), BucketedSync(model, cpu, bucket_cap_mb=25)
        flat = torch.zeros(grad_bytes // 4)
        # gloo's own time for one message of this size: its latency floor,
        # which small gradient sets like LeNet's cannot beat.
        gloo_same_size_s = _timed(lambda: dist.all_reduce(flat), repeats)
        scratch_s = _timed(scratch.synchronize, repeats)
        bucketed_s = _timed(bucketed.synchronize, repeats)
        step_repeats = max(3, repeats // (4 if name == "resnet18" else 1))
        local_s = _timed(lambda: local_step(model), step_repeats)
        ddp = DDPSync(model, cpu, bucket_cap_mb=25)
        ddp_s = _timed(lambda: local_step(ddp.module), step_repeats)
        exposed_s = max(ddp_s - local_s, 0.0)
        results[name] = {
            "num_params": sum(p.numel() for p in model.parameters()),
            "grad_MB": grad_bytes / 1e6,
            "gloo_same_size_ms": gloo_same_size_s * 1e3,
            "scratch_ms": scratch_s * 1e3, "bucketed_ms": bucketed_s * 1e3,
            "scratch_busbw_MB_s": bus_bandwidth_mb_s(grad_bytes, scratch_s),
            "bucketed_busbw_MB_s": bus_bandwidth_mb_s(grad_bytes, bucketed_s),
            "bucketed_time_over_bound": bucketed_s / (grad_bytes * 2 * (WORLD_SIZE - 1) / WORLD_SIZE
                                                      / (results["gloo_busbw_MB_s"] * 1e6)),
            "local_step_ms": local_s * 1e3, "ddp_step_ms": ddp_s * 1e3,
            "ddp_exposed_ms": exposed_s * 1e3,
            "ddp_hidden_share": 1 - min(exposed_s / bucketed_s, 1.0),
        }
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from socket import socket
    with socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(_worker, args=(port, args.repeats, queue), nprocs=WORLD_SIZE,
                       start_method="spawn")
    emit("sync_strategies", command_line(), queue.get())


if __name__ == "__main__":
    main()
