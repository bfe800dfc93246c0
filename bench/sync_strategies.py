"""Benchmark 3: time in gradient communication per step, for each sync strategy.

Two gloo processes (one thread each) reduce LeNet's and ResNet-18's gradient
sets with `scratch` and `bucketed`, through the node's shared memory (the
default) and through gloo (`*_gloo`), and measure gloo's own bus bandwidth on
a large message in the same run. Each reduction is timed right after a
barrier and, as in training, right after a backward pass (`*_after_backward`).
For `ddp`, the share of communication hidden behind backward is
1 - (DDP step - local step) / gloo bucketed reduction time.

`sharded` (each worker sums and updates half) is measured beside the others
over whole steps (`*.steps`): backward, sync and an SGD update with momentum
0.9 (so that there is optimizer state to shard), taking turns each repeat.
Per strategy and worker: seconds in communication (the strategy's own
`sync_time_s`), bytes written to gloo's sockets (the process's `wchar`,
which counts them; shared memory writes none), the optimizer step's time,
and the bytes held by parameters and optimizer state after the step.

    python bench/sync_strategies.py [--repeats 80] [--no-append]
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
from common import command_line, emit, free_port, median  # noqa: E402

from orchestrator.training.sync.collectives import allreduce_  # noqa: E402
from orchestrator.training.models import build_model  # noqa: E402
from orchestrator.training.sync.base import GradientSync  # noqa: E402
from orchestrator.training.sync.strategies import ShardedSync, make_sync  # noqa: E402

WORLD_SIZE = 2
LARGE_MESSAGE_BYTES = 64 * 1024 * 1024
BATCH_PER_WORKER = {"lenet": 128, "resnet18": 16}
MOMENTUM = 0.9
# Whole steps per strategy, taking turns: ResNet-18's take a third of a second each.
STEP_REPEATS_DIVISOR = {"lenet": 2, "resnet18": 8}
# name in the record: (strategy, sums through the node's shared memory)
STEP_STRATEGIES = {"scratch": ("scratch", True), "bucketed": ("bucketed", True),
                   "scratch_gloo": ("scratch", False), "bucketed_gloo": ("bucketed", False),
                   "ddp": ("ddp", False), "sharded": ("sharded", False)}


def bus_bandwidth_mb_s(num_bytes: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth: what each link carries in a ring allreduce."""
    return 2 * (WORLD_SIZE - 1) / WORLD_SIZE * num_bytes / seconds / 1e6


def _timed(function, repeats: int) -> float:
    return _timed_side_by_side({"only": function}, repeats)["only"]


def _timed_side_by_side(functions: dict, repeats: int, prelude=None) -> dict[str, float]:
    """Median seconds of each function, taking turns each repeat; each call
    follows a barrier and then, if given, an untimed `prelude`.

    On this benchmark's 2-core VM a small allreduce takes either about 0.4 ms
    or about 4 ms, in stretches; timed one after the other, two functions can
    land in different stretches and their ratio says nothing.
    """
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            dist.barrier()
            if prelude is not None:
                prelude()
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: median(values) for name, values in times.items()}


def _worker(rank: int, port: int, repeats: int, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD_SIZE)
    cpu = torch.device("cpu")
    large = torch.ones(LARGE_MESSAGE_BYTES // 4)
    gloo_s = _timed(lambda: allreduce_(large), max(3, repeats // 4))
    results = {"num_workers": WORLD_SIZE,
               "gloo_busbw_MB_s": bus_bandwidth_mb_s(LARGE_MESSAGE_BYTES, gloo_s)}
    for name in ("lenet", "resnet18"):
        model = build_model(name, seed=0)
        x = torch.rand(BATCH_PER_WORKER[name], 1, 28, 28)
        y = torch.randint(0, 10, (BATCH_PER_WORKER[name],))

        def local_step(module):
            module.zero_grad(set_to_none=True)
            F.cross_entropy(module(x), y).backward()

        local_step(model)
        grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
        syncs = {}
        for suffix, shared_memory in (("", True), ("_gloo", False)):
            for sync_name in ("scratch", "bucketed"):
                # Constructed last, the gloo `bucketed` owns the gradients that backward
                # fills below; the others reduce buffers of the same sizes.
                syncs[sync_name + suffix] = make_sync(sync_name, model, cpu, bucket_cap_mb=25,
                                                      shared_memory=shared_memory)
        assert syncs["bucketed"].transport == "shared memory", syncs["bucketed"].transport
        flat = torch.zeros(grad_bytes // 4)
        # gloo's own time for one message of this size: its latency floor,
        # which small gradient sets like LeNet's cannot beat over gloo; waited
        # for as the strategies wait (`allreduce_`), and blocked in gloo's own wait.
        reductions = _timed_side_by_side({"gloo_same_size": lambda: allreduce_(flat),
                                          "gloo_same_size_blocked": lambda: dist.all_reduce(flat),
                                          **{sync_name: sync.synchronize
                                             for sync_name, sync in syncs.items()}}, repeats)
        gloo_same_size_s, bucketed_s = reductions["gloo_same_size"], reductions["bucketed"]
        after_backward = _timed_side_by_side({sync_name: syncs[sync_name].synchronize
                                              for sync_name in ("bucketed", "bucketed_gloo")},
                                             max(3, repeats // (8 if name == "resnet18" else 2)),
                                             prelude=lambda: local_step(model))
        step_repeats = max(3, repeats // (4 if name == "resnet18" else 1))
        ddp = make_sync("ddp", model, cpu, bucket_cap_mb=25, shared_memory=False)
        steps = _timed_side_by_side({"local": lambda: local_step(model),
                                     "ddp": lambda: local_step(ddp.module)}, step_repeats)
        local_s, ddp_s = steps["local"], steps["ddp"]
        exposed_s = max(ddp_s - local_s, 0.0)
        # What gloo's large-message bandwidth would take for these bytes.
        bound_s = grad_bytes * 2 * (WORLD_SIZE - 1) / WORLD_SIZE / (results["gloo_busbw_MB_s"] * 1e6)
        results[name] = {
            "num_params": sum(p.numel() for p in model.parameters()),
            "grad_MB": grad_bytes / 1e6,
            "gloo_same_size_ms": gloo_same_size_s * 1e3,
            "gloo_same_size_blocked_ms": reductions["gloo_same_size_blocked"] * 1e3,
            **{f"{sync}_ms": reductions[sync] * 1e3 for sync in syncs},
            **{f"{sync}_busbw_MB_s": bus_bandwidth_mb_s(grad_bytes, reductions[sync])
               for sync in syncs},
            "bucketed_time_over_bound": bucketed_s / bound_s,
            "bucketed_gloo_time_over_bound": reductions["bucketed_gloo"] / bound_s,
            "bucketed_time_over_gloo_same_size": bucketed_s / gloo_same_size_s,
            "bucketed_after_backward_ms": after_backward["bucketed"] * 1e3,
            "bucketed_gloo_after_backward_ms": after_backward["bucketed_gloo"] * 1e3,
            "local_step_ms": local_s * 1e3, "ddp_step_ms": ddp_s * 1e3,
            "ddp_exposed_ms": exposed_s * 1e3,
            "ddp_hidden_share": 1 - min(exposed_s / reductions["bucketed_gloo"], 1.0),
            "steps": _whole_steps(name, x, y, max(3, repeats // STEP_REPEATS_DIVISOR[name])),
        }
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def _bytes_written() -> int:
    """What this process has written through write calls, sockets included (gloo's)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar"))


def _held_mb(tensors) -> float:
    """MB of the distinct storages behind `tensors` (views of one buffer count once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values()) / 1e6


def _whole_steps(name: str, x: torch.Tensor, y: torch.Tensor, repeats: int) -> dict:
    """Each strategy's backward, sync and SGD update on a model of its own, in turns."""
    cpu = torch.device("cpu")
    runs = {}
    for label, (strategy, shared_memory) in STEP_STRATEGIES.items():
        model = build_model(name, seed=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=MOMENTUM)
        sync = make_sync(strategy, model, cpu, bucket_cap_mb=25, shared_memory=shared_memory,
                         optimizer=optimizer)
        runs[label] = (model, optimizer, sync)
    times = {label: {"comm": [], "sent": [], "sent_in_synchronize": [], "optimizer_step": []}
             for label in runs}
    for _ in range(repeats):
        for label, (model, optimizer, sync) in runs.items():
            _one_step(sync, optimizer, x, y, times[label])
    figures = {}
    for label, (model, optimizer, sync) in runs.items():
        optimizers = [optimizer, *([sync.shards.optimizer] if isinstance(sync, ShardedSync) else [])]
        state = [value for opt in optimizers for per_param in opt.state.values()
                 for value in per_param.values() if isinstance(value, torch.Tensor)]
        figures[label] = {"transport": sync.transport,
                          "comm_ms": median(times[label]["comm"]) * 1e3,
                          "sent_MB": median(times[label]["sent"]) / 1e6,
                          # sharded: the reduce-scatter alone
                          "sent_in_synchronize_MB": median(times[label]["sent_in_synchronize"]) / 1e6,
                          "optimizer_step_ms": median(times[label]["optimizer_step"]) * 1e3,
                          "params_MB": _held_mb(model.parameters()),
                          "optimizer_state_MB": _held_mb(state)}
    return figures


def _one_step(sync: GradientSync, optimizer: torch.optim.Optimizer, x: torch.Tensor,
              y: torch.Tensor, times: dict) -> None:
    """The loop's train_batch (loss and check included), its parts timed."""
    dist.barrier()
    sync.zero_grad()
    sync_time_s, written = sync.sync_time_s, _bytes_written()
    F.cross_entropy(sync.module(x), y).backward()  # ddp communicates in here
    before_synchronize = _bytes_written()
    sync.synchronize()
    times["sent_in_synchronize"].append(_bytes_written() - before_synchronize)
    sync.agreed_count(torch.zeros((), dtype=torch.int64))  # the non-finite check's read
    start, comm_before_step_s = time.perf_counter(), sync.sync_time_s
    sync.step(optimizer)
    # sharded's step all-gathers too: that is communication, not the update.
    times["optimizer_step"].append(time.perf_counter() - start
                                   - (sync.sync_time_s - comm_before_step_s))
    times["comm"].append(sync.sync_time_s - sync_time_s)
    times["sent"].append(_bytes_written() - written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=80)
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    port = free_port()
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(_worker, args=(port, args.repeats, queue), nprocs=WORLD_SIZE,
                       start_method="spawn")
    emit("sync_strategies", command_line(), queue.get(), append=not args.no_append)


if __name__ == "__main__":
    main()
