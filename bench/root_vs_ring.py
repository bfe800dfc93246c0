"""Benchmark: the book's allreduce (`--sync root`) against gloo's ring, at k = 2, 3, 4
Ray Train workers on nodes of their own, over links slow enough that bytes dominate.

tools/netns_cluster.py makes a head of no CPU and max(k) worker nodes of one
CPU each, every node's link capped at `--rate` (tc tbf on what it sends).
For each k, a driver in the head's namespace fits a TorchTrainer of k
workers, one per node; each worker gives LeNet's gradients the values
rank + 1 and times, taking turns each repeat after a barrier, one `synchronize`
of each strategy as the training loop calls it (no training):

    root      the book's allreduce, per tensor: worker 0 receives and adds every
              other worker's copy in rank order, then sends the sum to each
    scratch   gloo's allreduce per tensor; bucketed: of one flat buffer (LeNet's
              gradients fit one 25 MB bucket). torch's gloo process group calls
              gloo::allreduce without naming an algorithm, which is its ring:
              reduce-scatter, then all-gather

Predicted, per step, for n gradient bytes and a link of R bytes/s each way:
root's worker 0 receives (k-1)n and then sends (k-1)n, 2(k-1)n/R (gloo's
sends wait for the receive to be posted, so the book's one-at-a-time receives
are one at a time on the wire too); every other worker sends and receives n.
A ring's every worker sends and receives 2(k-1)/k n at once: 2(k-1)/k n/R.
Measured: each strategy's median seconds, the bytes each rank wrote to its
sockets per step (/proc/self/io's wchar; Ray's own chatter adds a little;
gloo reads with recv, which rchar does not count, so received bytes are
predicted only), and each rank's CPU seconds over wall seconds while timing, with
the whole machine's busy share (/proc/stat), to tell a link-bound run from a
CPU-bound one (a ring's wait polls with sched_yield for its first 20 ms, so a
busy rank is no sign of a CPU-bound one: measured against predicted time is).

Needs root (network namespaces). A k = 4 run oversubscribes a 2-core machine
(5 Ray nodes, 4 workers): at a low rate the link, not the CPU, should set the
times; the record says whether it did.

    sudo python bench/root_vs_ring.py [--workers 2,3,4] [--rate 50mbit] [--repeats 20]
                                      [--no-append]
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import REPO, child_result, command_line, emit, median, print_child_result  # noqa: E402

sys.path.insert(0, str(REPO))

STRATEGIES = ("root", "scratch", "bucketed")
TC_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bytes_per_s(rate: str) -> float:
    """tc's rate ("50mbit") in bytes per second."""
    number, unit = re.fullmatch(r"([0-9.]+)([a-z]+)", rate).groups()
    return float(number) * TC_UNITS[unit] / 8


def predicted(num_workers: int, gradient_bytes: int, link_bytes_per_s: float) -> dict:
    """Bytes sent and received per step by worker 0 and by each other worker, and the
    seconds they take at `link_bytes_per_s` each way."""
    k, n = num_workers, gradient_bytes
    ring = 2 * (k - 1) / k * n
    return {
        "root": {"rank0_sent_bytes": (k - 1) * n, "rank0_received_bytes": (k - 1) * n,
                 "other_sent_bytes": n, "other_received_bytes": n,
                 "seconds": 2 * (k - 1) * n / link_bytes_per_s},
        **{name: {"rank0_sent_bytes": ring, "rank0_received_bytes": ring,
                  "other_sent_bytes": ring, "other_received_bytes": ring,
                  "seconds": ring / link_bytes_per_s} for name in ("scratch", "bucketed")},
    }


def _written_bytes() -> int:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"])


def _machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def worker_loop(config: dict) -> dict:
    """On each Ray Train worker: every strategy's `synchronize`, timed side by side."""
    import torch
    import torch.distributed as dist

    from orchestrator.training.models import build_model
    from orchestrator.training.sync.collectives import gather_strings, get_rank
    from orchestrator.training.sync.strategies import make_sync

    torch.set_num_threads(1)
    device, rank = torch.device("cpu"), get_rank()
    syncs = {}
    for name in STRATEGIES:
        model = build_model(config["model"], seed=0)
        syncs[name] = make_sync(name, model, device, bucket_cap_mb=25.0, shared_memory=False)
        for param in model.parameters():
            param.grad = torch.full_like(param, rank + 1.0) if param.grad is None else (
                param.grad.fill_(rank + 1.0))
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    seconds = {name: [] for name in STRATEGIES}
    sent = {name: 0 for name in STRATEGIES}
    cpu_s = {name: 0.0 for name in STRATEGIES}
    for repeat in range(config["repeats"] + 1):  # the first to warm up
        for name, sync in syncs.items():
            dist.barrier()
            written_before, cpu_before = _written_bytes(), time.process_time()
            start = time.perf_counter()
            sync.synchronize()
            elapsed = time.perf_counter() - start
            written_after, cpu_after = _written_bytes(), time.process_time()
            if repeat:
                seconds[name].append(elapsed)
                sent[name] += written_after - written_before
                cpu_s[name] += cpu_after - cpu_before
            if repeat == 0:  # every strategy summed 1 + 2 + ... + k
                total = config["num_workers"] * (config["num_workers"] + 1) / 2
                assert all(torch.all(p.grad == total) for p in sync.model.parameters()), name
            for param in sync.model.parameters():  # back to this rank's values
                param.grad.fill_(rank + 1.0)
        if repeat == 0:
            busy_before = _machine_busy()
    busy_after = _machine_busy()
    mine = {name: {"median_s": median(seconds[name]),
                   "sent_bytes_per_step": sent[name] / config["repeats"],
                   "cpu_share": cpu_s[name] / sum(seconds[name])}
            for name in STRATEGIES}
    every = [json.loads(text) for text in gather_strings(json.dumps(mine))]
    return {"gradient_bytes": gradient_bytes, "ranks": every,
            "transports": {name: sync.transport for name, sync in syncs.items()},
            "machine_busy_share": (busy_after[0] - busy_before[0])
            / max(busy_after[1] - busy_before[1], 1)}


def inner(args) -> None:
    """The driver, inside the head's namespace: one TorchTrainer of k workers."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    ray.init(runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, logging_level="ERROR",
             log_to_driver=False)
    trainer = TorchTrainer(
        worker_loop, train_loop_config={"model": args.model, "repeats": args.repeats,
                                        "num_workers": args.workers[0]},
        scaling_config=ScalingConfig(num_workers=args.workers[0],
                                     resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=f"root-vs-ring-{args.workers[0]}",
                             storage_path=args.storage))
    print_child_result(trainer.fit().return_value)


def run_k(cluster, args, num_workers: int, storage: str) -> dict:
    argv = [sys.executable, __file__, "--inner", "--workers", str(num_workers),
            "--repeats", str(args.repeats), "--model", args.model, "--storage", storage]
    return child_result(cluster, argv, args.timeout_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=lambda text: [int(k) for k in text.split(",")],
                        default=[2, 3, 4])
    parser.add_argument("--rate", default="50mbit", help="each node's link, tc's units")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--model", default="lenet")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--no-append", action="store_true",
                        help="print the record only (a smoke run)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--storage", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args)
        return
    sys.path.insert(0, str(REPO / "tools"))
    import netns_cluster

    if not netns_cluster.namespaces_available():
        sys.exit("bench/root_vs_ring.py needs network namespaces (root): a rate needs them")
    link_bytes_per_s = rate_bytes_per_s(args.rate)
    results = {}
    with tempfile.TemporaryDirectory(prefix="root-vs-ring-") as storage, \
            netns_cluster.netns_cluster(max(args.workers) + 1, 1, head_cpus=0,
                                        rate=args.rate) as cluster:
        for num_workers in args.workers:
            measured = run_k(cluster, args, num_workers, storage)
            expected = predicted(num_workers, measured["gradient_bytes"], link_bytes_per_s)
            results[f"k{num_workers}"] = {
                name: {"predicted_s": expected[name]["seconds"],
                       "measured_s": measured["ranks"][0][name]["median_s"],
                       "measured_over_predicted": measured["ranks"][0][name]["median_s"]
                       / expected[name]["seconds"],
                       "predicted_rank0_sent_bytes": expected[name]["rank0_sent_bytes"],
                       "measured_rank0_sent_bytes": measured["ranks"][0][name][
                           "sent_bytes_per_step"],
                       "predicted_other_sent_bytes": expected[name]["other_sent_bytes"],
                       "measured_other_sent_bytes": [rank[name]["sent_bytes_per_step"]
                                                     for rank in measured["ranks"][1:]],
                       "predicted_rank0_received_bytes": expected[name]["rank0_received_bytes"],
                       "cpu_share_per_rank": [rank[name]["cpu_share"]
                                              for rank in measured["ranks"]],
                       "transport": measured["transports"][name]}
                for name in STRATEGIES}
            results[f"k{num_workers}"]["root_over_bucketed"] = (
                results[f"k{num_workers}"]["root"]["measured_s"]
                / results[f"k{num_workers}"]["bucketed"]["measured_s"])
            results[f"k{num_workers}"]["machine_busy_share"] = measured["machine_busy_share"]
            results[f"k{num_workers}"]["gradient_bytes"] = measured["gradient_bytes"]
    emit("root_vs_ring", command_line(),
         {"rate": args.rate, "model": args.model, "repeats": args.repeats, **results},
         append=not args.no_append)


if __name__ == "__main__":
    main()
