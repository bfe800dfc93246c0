"""Benchmark: one worker of two at about half speed, the even split against the proportional.

Two Ray Train workers (LeNet, global batch 256, one core each, pinned by
local rank with --pin-cores) train while a busy process spins on the
second worker's core, so that worker gets about half of it. With the even
split every step waits for it; with `--split proportional` its share
follows its measured speed (13.6, exercise 2). Trials alternate, even
then proportional, so both see the same machine; epoch 1 of each is left
out (it is the even split in both, and a proportional run measures in it).

Figures: the speedup of the proportional split (median epoch time, even /
proportional; target >= 1.3), the ideal speedup at the speeds measured
((v_fast + v_slow) / (2 v_slow), 1.5 at exactly half speed), each worker's
speed (examples per second of forward and backward) and the shares the
proportional split settled on. Needs 2 free cores: run it alone.

    python bench/straggler.py [--rounds 3 --epochs 4 --train-limit 24576] [--no-append]
"""

import argparse
import os
import sys
import tempfile

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402
from orchestrator.training.worker import busy_process_on  # noqa: E402

GLOBAL_BATCH = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--sync", default="scratch")
    parser.add_argument("--train-limit", type=int, default=24_576)
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "needs two cores"
    dataset = data.load(train_limit=args.train_limit, test_limit=1000)
    rows: dict[str, list[dict]] = {"even": [], "proportional": []}
    busy = busy_process_on(cores[1])  # the core that --pin-cores gives local rank 1
    try:
        with tempfile.TemporaryDirectory() as storage:
            ray_cluster.connect(None, num_cpus=2)
            data_ref = ray.put(dataset)
            for round_index in range(args.rounds):
                for split in rows:
                    config = TrainConfig(model="lenet", num_workers=2,
                                         global_batch_size=GLOBAL_BATCH, lr=0.2,
                                         num_epochs=args.epochs, sync=args.sync, split=split,
                                         pin_cores=True, train_limit=args.train_limit,
                                         test_limit=1000)
                    result = run_trial(config, data_ref, name=f"{split}-{round_index}",
                                       storage_path=storage, max_failures=0)
                    rows[split] += result.return_value[1:]
            ray.shutdown()
    finally:
        busy.kill()
        busy.wait()
    # Each worker's speed: its examples per second of its own forward and backward.
    speeds = {split: [[share * row["steps_per_epoch"] / seconds
                       for share, seconds in zip(row["worker_shares"], row["worker_compute_s"])]
                      for row in split_rows] for split, split_rows in rows.items()}
    fast, slow = (median(speeds["even"][i][rank] for i in range(len(speeds["even"])))
                  for rank in (0, 1))
    even_s = median(row["epoch_time_s"] for row in rows["even"])
    proportional_s = median(row["epoch_time_s"] for row in rows["proportional"])
    speedup = even_s / proportional_s
    figures = {
        "sync": args.sync, "global_batch": GLOBAL_BATCH,
        "epochs_measured_per_split": len(rows["even"]),
        "even_epoch_s": even_s, "proportional_epoch_s": proportional_s,
        "speedup_proportional_over_even": speedup,
        "ideal_speedup_at_measured_speeds": (fast + slow) / (2 * slow),
        "slowed_worker_relative_speed": slow / fast,
        "speeds_even_examples_per_s": {"worker 0": fast, "worker 1 (slowed)": slow},
        "speeds_proportional_examples_per_s": {
            f"worker {rank}": median(worker[rank] for worker in speeds["proportional"])
            for rank in (0, 1)},
        "proportional_shares": {f"worker {rank}": median(row["worker_shares"][rank]
                                                         for row in rows["proportional"])
                                for rank in (0, 1)},
        "proportional_compute_s": {f"worker {rank}": median(row["worker_compute_s"][rank]
                                                            for row in rows["proportional"])
                                   for rank in (0, 1)},
        "target": ">= 1.3", "target_met": speedup >= 1.3,
    }
    emit("straggler", command_line(), figures, append=not args.no_append)


if __name__ == "__main__":
    main()
