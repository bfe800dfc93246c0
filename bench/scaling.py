"""Benchmark 2: throughput of 1 against 2 workers (one thread each), weak and strong scaling.

Weak: the per-worker batch is fixed (128), so 2 workers step on 256.
Strong: the global batch is fixed (256), so 2 workers get 128 each.
Figure: throughput speedup (samples/s, 2 workers / 1 worker) and efficiency
(speedup / 2). The limit is 2.0 on two cores; targets: weak >= 1.85,
strong >= 1.7. Trials run one at a time, alternating, so both see the same machine.
Beside them, with Ray shut down: the ceiling this machine sets, the same
loop (batch 128) in two independent processes at once against one alone;
and the same loop in two processes in lockstep, one process group, their
gradients summed as our workers sum them (through shared memory, by
default): weak scaling as torchrun would run our loop, what synchronous
data parallelism itself costs here, before Ray. The lockstep
pair runs again beside the embedded Ray, idle: what Ray's own processes
cost a training they take no part in.

    python bench/scaling.py [--rounds 4 --epochs 2 --sync bucketed]
"""

import argparse
import functools
import multiprocessing
import os
import sys
import tempfile

import ray
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, free_port, median  # noqa: E402

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402
from orchestrator.training.loop import run_training  # noqa: E402

PER_WORKER_BATCH = 128
GLOBAL_BATCH = 256


def _plain_process(rank: int, world_size: int, port: int | None, train_limit: int, epochs: int,
                   sync: str, rates) -> None:
    """The training loop in a plain process, without Ray; with `port`, one of
    `world_size` processes in a gloo group (batch 128 each), else alone."""
    torch.set_num_threads(1)
    if port is not None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size)
    num_workers = world_size if port is not None else 1
    config = TrainConfig(model="lenet", num_workers=num_workers,
                         global_batch_size=PER_WORKER_BATCH * num_workers, lr=0.2, sync=sync,
                         num_epochs=epochs, train_limit=train_limit, test_limit=1000)
    history = run_training(config, data.load(train_limit=train_limit, test_limit=1000),
                           device=torch.device("cpu"), report=lambda *_: None)
    if port is None or rank == 0:  # a group's rate is already its total
        rates.put(median([row["samples_per_s"] for row in history]))
    if port is not None:
        dist.destroy_process_group()


def plain_processes_rate(num_processes: int, train_limit: int, epochs: int, sync: str,
                         lockstep: bool) -> float:
    """Total samples/s of `num_processes` plain loops running at once: independent,
    or in lockstep (one gloo group)."""
    port = free_port() if lockstep else None
    context = multiprocessing.get_context("spawn")
    rates = context.Queue()
    processes = [context.Process(target=_plain_process,
                                 args=(rank, num_processes, port, train_limit, epochs, sync, rates))
                 for rank in range(num_processes)]
    for process in processes:
        process.start()
    total = sum(rates.get() for _ in range(1 if lockstep else num_processes))
    for process in processes:
        process.join()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sync", default="bucketed")
    parser.add_argument("--train-limit", type=int, default=30_720)
    args = parser.parse_args()
    runs = {  # (name, workers, global batch)
        "weak_1": (1, PER_WORKER_BATCH), "weak_2": (2, 2 * PER_WORKER_BATCH),
        "strong_1": (1, GLOBAL_BATCH), "strong_2": (2, GLOBAL_BATCH),
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    # Share of a 2-worker epoch spent in the gradient allreduce, waiting for
    # the other worker included: where the distance to the ceiling goes.
    sync_shares: list[float] = []
    ceiling: dict[int, list[float]] = {1: [], 2: []}
    lockstep: list[float] = []
    lockstep_beside_ray: list[float] = []
    plain_rate = functools.partial(plain_processes_rate, train_limit=args.train_limit,
                                   epochs=args.epochs, sync=args.sync)
    dataset = data.load(train_limit=args.train_limit, test_limit=1000)
    with tempfile.TemporaryDirectory() as storage:
        for round_index in range(args.rounds):
            # A fresh cluster each round, measured idle first: a plain
            # driver's fit leaves its controller actor alive until the next one.
            ray_cluster.connect(None)
            data_ref = ray.put(dataset)
            lockstep_beside_ray.append(plain_rate(2, lockstep=True))
            for name, (workers, batch) in runs.items():
                config = TrainConfig(model="lenet", num_workers=workers, global_batch_size=batch,
                                     lr=0.2, num_epochs=args.epochs, sync=args.sync,
                                     train_limit=args.train_limit, test_limit=1000)
                result = run_trial(config, data_ref, name=f"{name}-{round_index}", storage_path=storage)
                rates[name] += [row["samples_per_s"] for row in result.return_value]
                if workers == 2:
                    sync_shares += [row["sync_time_s"] / row["epoch_time_s"]
                                    for row in result.return_value]
            ray.shutdown()
            for num_processes in (1, 2):
                ceiling[num_processes].append(plain_rate(num_processes, lockstep=False))
            lockstep.append(plain_rate(2, lockstep=True))
    figures = {"sync": args.sync,
               "no_ray_1_process_samples_per_s": median(ceiling[1]),
               "no_communication_speedup": median(ceiling[2]) / median(ceiling[1]),
               "no_ray_lockstep_2_process_samples_per_s": median(lockstep),
               "no_ray_lockstep_weak_speedup": median(lockstep) / median(ceiling[1]),
               "lockstep_beside_idle_ray_samples_per_s": median(lockstep_beside_ray),
               "idle_ray_lockstep_cost": 1 - median(lockstep_beside_ray) / median(lockstep),
               "two_worker_sync_share": median(sync_shares)}
    for kind, target in (("weak", 1.85), ("strong", 1.7)):
        one, two = median(rates[f"{kind}_1"]), median(rates[f"{kind}_2"])
        figures.update({f"{kind}_1w_samples_per_s": one, f"{kind}_2w_samples_per_s": two,
                        f"{kind}_speedup": two / one, f"{kind}_efficiency": two / one / 2,
                        f"{kind}_target": f">= {target}"})
    emit("scaling", command_line(), figures)


if __name__ == "__main__":
    main()
