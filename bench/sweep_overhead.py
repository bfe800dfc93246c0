"""Benchmark 4: the fixed cost of a sweep trial, and where it goes.

A sweep of N tiny trials (1 worker, one short epoch each, one trial at a
time): wall time minus the trials' training time, per trial (target <= 8 s).
The cost is split into what happens inside a trial but outside training
(worker group start, process group, data, checkpoints: the trial function's
own time minus its epochs) and what Tune adds around the trials. The same
number of trials then runs for two epochs as an ASHA sweep, which stops the
losing ones after the first (how many is reported): a stopped trial's
process has to end its fit before the next trial can reuse it (see
`ray_fastpath.ReportToTune`). Everything runs twice, side by side in one
run: on the fast path (`orchestrator/ray_fastpath.py`), then on the stock
path (Ray's public API alone, `ORCHESTRATOR_RAY_FAST_PATH=0`).

`--netns` measures the same (fast path) on a multi-node cluster made on this
machine (tools/netns_cluster.py, root: a head and 2 nodes of 2 CPUs, each in
its own network namespace): the sweep attaches to it from the head's
namespace, as `sweep.py --address` does (code shipped, storage checked on
every node, node-disjoint placement), alternately with the embedded Ray in
this process, `--runs` times each.

    python bench/sweep_overhead.py [--trials 4]
    python bench/sweep_overhead.py --netns [--runs 2]    # root
"""

import argparse
import os
import sys
import tempfile
import time

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import (REPO, child_result, command_line, emit, median,  # noqa: E402
                    print_child_result)

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data
from orchestrator import ray_fastpath  # noqa: E402
from orchestrator.config.grid import SweepConfig  # noqa: E402
from orchestrator.driver.tune_experiment import run_experiment  # noqa: E402
from orchestrator.driver.tune_results import collect  # noqa: E402


def timed_sweep(sweep: SweepConfig, data_ref: ray.ObjectRef) -> dict[str, float]:
    """Run `sweep` one trial at a time: its wall time, and its trials' own times."""
    with tempfile.TemporaryDirectory() as storage:
        started = time.monotonic()
        result_grid = run_experiment(sweep, data_ref, storage_path=storage, sweep_id="bench",
                                max_concurrent=1, resume=False)
        wall_s = time.monotonic() - started
        trials, epochs, _ = collect(result_grid, sweep, storage, sweep_id="bench")
        trial_function_s = [result.metrics["time_total_s"] for result in result_grid]
    training_s = epochs["epoch_time_s"].sum()
    return {
        "trials": len(trials), "wall_s": wall_s, "training_s": training_s,
        "trials_stopped_early": int((epochs.groupby("trial_id").size() < sweep.base.num_epochs).sum()),
        "fixed_cost_per_trial_s": (wall_s - training_s) / len(trials),
        "inside_trial_outside_training_s": median(trial_function_s) - median(epochs["epoch_time_s"]),
        "tune_around_trials_per_trial_s": (wall_s - sum(trial_function_s)) / len(trials),
    }


def measure_path(sweep: SweepConfig, asha_sweep: SweepConfig,
                 address: str | None = None) -> dict[str, float]:
    """Both sweeps on a fresh embedded Ray (or the cluster at `address`), on the
    path `ray_fastpath.enabled()` says."""
    ray_cluster.connect(address)
    fifo = timed_sweep(sweep, ray.put(data.load(train_limit=640, test_limit=100)))
    del fifo["trials_stopped_early"]  # none: only a scheduler stops trials
    asha = timed_sweep(asha_sweep, ray.put(data.load(train_limit=8192, test_limit=100)))
    ray.shutdown()
    return {**fifo,
            "asha_trials_stopped_early": asha["trials_stopped_early"],
            "asha_fixed_cost_per_trial_s": asha["fixed_cost_per_trial_s"],
            "asha_tune_around_trials_per_trial_s": asha["tune_around_trials_per_trial_s"]}


def on_netns_cluster(trials: int, runs: int, sweep: SweepConfig,
                     asha_sweep: SweepConfig) -> dict:
    """The fixed cost on a 3-node netns cluster against the embedded Ray, alternately."""
    sys.path.insert(0, str(REPO / "tools"))
    import netns_cluster

    attached, embedded = [], []
    with netns_cluster.netns_cluster(3, 2, head_cpus=0) as cluster:
        for _ in range(runs):
            attached.append(child_result(cluster, [sys.executable, __file__, "--trials",
                                                   str(trials), "--address",
                                                   cluster.head_address], timeout_s=900))
            embedded.append(measure_path(sweep, asha_sweep))
    figures = {"cluster": "head (0 CPUs) + 2 nodes x 2 CPUs, netns, attached from the head",
               "runs": runs}
    for name, results in (("embedded", embedded), ("netns", attached)):
        for key in ("fixed_cost_per_trial_s", "inside_trial_outside_training_s",
                    "tune_around_trials_per_trial_s", "asha_fixed_cost_per_trial_s"):
            figures[f"{name}_{key}"] = [round(result[key], 2) for result in results]
    figures["netns_to_embedded_fixed_cost"] = (median(figures["netns_fixed_cost_per_trial_s"])
                                               / median(figures["embedded_fixed_cost_per_trial_s"]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--netns", action="store_true",
                        help="on a 3-node netns cluster beside the embedded Ray (root)")
    parser.add_argument("--runs", type=int, default=2, help="with --netns: runs of each side")
    parser.add_argument("--address", help=argparse.SUPPRESS)  # --netns's attached side
    args = parser.parse_args()
    lrs = tuple(0.1 * (index + 1) for index in range(args.trials))
    sweep = SweepConfig.from_dict(dict(workers=(1,), batch_sizes=(64,), lrs=lrs, num_epochs=1,
                                       train_limit=640, test_limit=100))
    # ASHA compares test accuracy after the first epoch: at batch 16, lr 0.5
    # learns from 8,192 images and the smaller rates do not, so it stops those.
    asha_sweep = SweepConfig.from_dict({
        **sweep.to_dict(), "scheduler": "asha", "num_epochs": 2, "batch_sizes": (16,),
        "train_limit": 8192, "lrs": (0.5, *(0.001 * (index + 1) for index in range(args.trials - 1)))})
    if not ray_fastpath.enabled():
        parser.error(f"the fast path is off here: unset {ray_fastpath.SWITCH_ENV_VAR}")
    if args.address:
        print_child_result(measure_path(sweep, asha_sweep, args.address))
        return
    if args.netns:
        emit("sweep_overhead_cluster", command_line(),
             {**on_netns_cluster(args.trials, args.runs, sweep, asha_sweep),
              "target": "measured beside the embedded Ray (none set)"})
        return
    fast = measure_path(sweep, asha_sweep)
    # The same sweeps, one after the other in this run, on Ray's public API alone.
    os.environ[ray_fastpath.SWITCH_ENV_VAR] = "0"
    stock = measure_path(sweep, asha_sweep)
    emit("sweep_overhead", command_line(), {
        **fast,
        **{f"stock_{name}": value for name, value in stock.items()},
        "stock_to_fast_fixed_cost": stock["fixed_cost_per_trial_s"] / fast["fixed_cost_per_trial_s"],
        "target": "<= 8 s per trial",
    })


if __name__ == "__main__":
    main()
