"""Benchmark: trials on disjoint nodes (orchestrator/driver/placement.py).

1. Makespan (a pure computation, seconds to run): `--preset scaling` planned
   by `plan.fit_to_cluster` on a described cluster (default 8 nodes x 8
   GPUs), each trial's time from the scaling model's epoch seconds
   (docs/examples/exercises-2core/scaling_model.csv, per-worker batch, one
   named link) times its epochs, plus a fixed start-up per trial. One trial
   at a time (the plan before node-disjoint placement) is their sum; the
   node-disjoint plan is a list-scheduling simulation of what Tune and Ray
   do with it: trials start in grid order as Tune's slots free, each once
   its whole nodes are free (its placement group), the first waiting trial
   first. Target: 3x shorter or better.
2. `--netns`: the sweep `--workers 1,2 --lr 0.1,0.2` on a one-machine
   cluster of 3 nodes of 2 CPUs (tools/netns_cluster.py; root): how many
   trials ran at once and whether two that overlapped shared a node, from
   the recorded node ids and times. Target: at least 2 at once, none shared.

    python bench/placement.py                 # the makespan alone
    python bench/placement.py --netns         # and the one-machine sweep (root)
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, os.path.dirname(__file__))
from common import REPO, command_line, emit  # noqa: E402

sys.path.insert(0, str(REPO))
from orchestrator.config import cli  # noqa: E402
from orchestrator.driver import checks, plan  # noqa: E402
from orchestrator.driver.cluster import Cluster  # noqa: E402

MODEL_CSV = REPO / "docs" / "examples" / "exercises-2core" / "scaling_model.csv"
TARGET_RATIO = 3.0
# bench/results/sweep_overhead.jsonl: about 6 s of start-up per trial.
TRIAL_START_S = 6.0


def trial_seconds(model: pd.DataFrame, link: str, num_workers: int, num_epochs: int) -> float:
    """A trial's seconds: the model's epoch at this worker count, per-worker batch."""
    rows = model[(model["link"] == link) & (model["batch_scaling"] == "per-worker")
                 & (model["num_workers"] == num_workers)]
    assert len(rows) >= 1, (link, num_workers)
    return TRIAL_START_S + num_epochs * float(rows["epoch_s"].median())


def simulate(durations_s: list[float], nodes_needed: list[int], num_nodes: int,
             max_concurrent: int) -> float:
    """The makespan of trials started in order, at most `max_concurrent` at once
    (Tune's slots), each once `nodes_needed` whole nodes are free (Ray's
    placement groups, the first waiting trial served first)."""
    clock, free_nodes = 0.0, num_nodes
    waiting = list(range(len(durations_s)))
    running: list[tuple[float, int]] = []  # (end, trial)
    holding_slot: list[int] = []  # started by Tune, waiting for its nodes
    while waiting or holding_slot or running:
        while waiting and len(holding_slot) + len(running) < max_concurrent:
            holding_slot.append(waiting.pop(0))
        for trial in list(holding_slot):
            if nodes_needed[trial] <= free_nodes:
                holding_slot.remove(trial)
                free_nodes -= nodes_needed[trial]
                running.append((clock + durations_s[trial], trial))
        running.sort()
        clock, ended = running.pop(0)
        free_nodes += nodes_needed[ended]
    return clock


def makespan(num_nodes: int, gpus_per_node: int, cpus_per_node: int, link: str) -> dict:
    node = {"CPU": float(cpus_per_node), "GPU": float(gpus_per_node)}
    cluster = Cluster(address=None, dashboard_url=None, node_resources=(node,) * num_nodes)
    with tempfile.TemporaryDirectory() as folder:
        args = cli.sweep_parser("").parse_args(["--preset", "scaling", "--out", folder])
        fitted = plan.fit_to_cluster(checks.sweep_request(args), cluster)
    model = pd.read_csv(MODEL_CSV)
    points = fitted.sweep.grid
    durations = [trial_seconds(model, link, point.train.num_workers, point.train.num_epochs)
                 for point in points]
    nodes = [fitted.placements[point.train.num_workers].num_nodes for point in points]
    one_at_a_time_s = sum(durations)
    disjoint_s = simulate(durations, nodes, num_nodes, fitted.max_concurrent_trials)
    ratio = one_at_a_time_s / disjoint_s
    return {"cluster": f"{num_nodes} nodes x {gpus_per_node} GPUs, {cpus_per_node} CPUs each",
            "link": link, "trials": len(points), "worker_counts": list(fitted.sweep.workers),
            "max_concurrent_trials": fitted.max_concurrent_trials,
            "one_at_a_time_makespan_s": round(one_at_a_time_s, 1),
            "node_disjoint_makespan_s": round(disjoint_s, 1),
            "makespan_ratio": round(ratio, 2), "target_ratio": TARGET_RATIO,
            "target_met": ratio >= TARGET_RATIO}


def netns_sweep() -> dict:
    """The one-machine sweep: 3 nodes of 2 CPUs, `--workers 1,2 --lr 0.1,0.2`."""
    sys.path.insert(0, str(REPO / "tools"))
    import netns_cluster

    from orchestrator.report import timeline

    with tempfile.TemporaryDirectory() as folder, netns_cluster.netns_cluster(3, 2) as cluster:
        out_dir = Path(folder) / "out"
        started = time.monotonic()
        run = cluster.run_in("head", [
            sys.executable, "experiments/sweep.py", "--address", cluster.head_address,
            "--workers", "1,2", "--lr", "0.1,0.2", "--epochs", "2", "--train-limit", "12000",
            "--test-limit", "2000", "--no-calibrate", "--out", str(out_dir),
            "--storage", str(Path(folder) / "storage")], cwd=REPO, timeout=1800)
        wall_s = time.monotonic() - started
        if run.returncode != 0:
            sys.exit(run.stdout[-3000:] + run.stderr[-3000:])
        spans = timeline.trial_spans(pd.read_csv(out_dir / "epochs.csv"))
    at_once, shared = timeline.max_trials_at_once(spans), timeline.shared_nodes(spans)
    return {"cluster": "3 nodes x 2 CPUs (netns)", "sweep_wall_s": round(wall_s, 1),
            "max_trials_at_once": at_once, "overlapping_trials_sharing_a_node": len(shared),
            "target_met": at_once >= 2 and not shared}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--cpus-per-node", type=int, default=64)
    parser.add_argument("--link", default="100 Gb/s Ethernet (RDMA)",
                        help="the scaling model's link (a value of its `link` column)")
    parser.add_argument("--netns", action="store_true",
                        help="also run the one-machine sweep on a netns cluster (root)")
    parser.add_argument("--smoke", action="store_true",
                        help="print the BENCH line without keeping it in bench/results")
    args = parser.parse_args()
    figures = {"makespan": makespan(args.nodes, args.gpus_per_node, args.cpus_per_node,
                                    args.link)}
    if args.netns:
        figures["one_machine"] = netns_sweep()
    figures["target_met"] = all(part["target_met"] for part in figures.values())
    emit("placement", command_line(), figures, append=not args.smoke)


if __name__ == "__main__":
    main()
