"""Benchmark 1: time per epoch of one of our 2-worker trials against plain torchrun.

The same LeNet training (data, epochs, batch, one thread per process, DDP)
as `torchrun --nproc-per-node 2 bench/torchrun_ddp.py` and as a trial of
ours, run alternately so that both see the same machine; figure: the ratio of
median epoch times, ours / torchrun (target <= 1.03). torchrun runs with no
Ray on the machine, as a torchrun user has it; it also runs once a round
beside our embedded Ray, idle, to show how much of the gap Ray's own
processes cost on a machine whose every core trains, and once with our DDP
strategy in place of plain DDP, so that the second ratio (ours / that) is
what Ray alone costs.

    python bench/ray_overhead.py [--rounds 4 --epochs 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def torchrun_epoch_times(epochs: int, batch_size: int, train_limit: int | None,
                         ddp: str = "plain") -> list[float]:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    limit = ["--train-limit", str(train_limit)] if train_limit else []
    run = subprocess.run([torchrun, "--nproc-per-node", "2", os.path.join(HERE, "torchrun_ddp.py"),
                          "--epochs", str(epochs), "--batch-size", str(batch_size), *limit,
                          "--ddp", ddp],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = next(l for l in run.stdout.splitlines() if l.startswith("EPOCH_TIMES "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-limit", type=int, default=None)
    args = parser.parse_args()
    config = TrainConfig(model="lenet", num_workers=2, global_batch_size=args.batch_size, lr=0.2,
                         num_epochs=args.epochs, sync="ddp", train_limit=args.train_limit,
                         test_limit=1000)
    fashion_mnist = data.load(train_limit=args.train_limit, test_limit=1000)
    alone, same_ddp, beside_ray, ours = [], [], [], []
    with tempfile.TemporaryDirectory() as storage:
        for round_index in range(args.rounds):
            alone += torchrun_epoch_times(args.epochs, args.batch_size, args.train_limit)
            same_ddp += torchrun_epoch_times(args.epochs, args.batch_size, args.train_limit,
                                             ddp="orchestrator")
            ray_cluster.connect(None)
            beside_ray += torchrun_epoch_times(args.epochs, args.batch_size, args.train_limit)
            result = run_trial(config, ray.put(fashion_mnist), name=f"overhead-{round_index}",
                               storage_path=storage)
            ours += [row["epoch_time_s"] for row in result.return_value]
            ray.shutdown()
    emit("ray_overhead", command_line(), {
        "epochs_measured_each": len(ours),
        "torchrun_epoch_s": median(alone), "ours_epoch_s": median(ours),
        "ratio_ours_over_torchrun": median(ours) / median(alone),
        "torchrun_our_ddp_epoch_s": median(same_ddp),
        "ratio_ours_over_torchrun_our_ddp": median(ours) / median(same_ddp),
        "torchrun_beside_idle_ray_epoch_s": median(beside_ray),
        "idle_ray_ratio": median(beside_ray) / median(alone),
        "target": "<= 1.03",
    })


if __name__ == "__main__":
    main()
