"""Benchmark: a 2-worker epoch with `--memory-format auto` against the same run in NCHW.

Each round runs both as Ray Train trials of 2 workers (one thread each), one
after the other, alternating which goes first, on one embedded Ray: as a sweep
would, the first `auto` trial times the layouts and the later ones find the
timings in the node's cache. Figure: `auto_speedup_over_nchw`, the median NCHW
epoch time over the median `auto` epoch time (> 1: auto is faster), with the
layout auto took and each auto trial's timings.

    python bench/memory_format.py [--rounds 3 --epochs 2 --train-limit 20000 --test-limit 2000]
"""

import argparse
import os
import sys
import tempfile

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402
from orchestrator.training import data  # noqa: E402

FORMATS = ("auto", "nchw")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-limit", type=int, default=20_000)
    parser.add_argument("--test-limit", type=int, default=2_000)
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    dataset = data.load(train_limit=args.train_limit, test_limit=args.test_limit)
    epoch_s: dict[str, list[float]] = {name: [] for name in FORMATS}
    auto_rows = []
    with tempfile.TemporaryDirectory() as storage:
        ray_cluster.connect(None)
        data_ref = ray.put(dataset)
        for round_index in range(args.rounds):
            for name in FORMATS if round_index % 2 == 0 else reversed(FORMATS):
                config = TrainConfig(model="lenet", num_workers=args.workers,
                                     global_batch_size=args.batch_size, lr=0.2,
                                     num_epochs=args.epochs, train_limit=args.train_limit,
                                     test_limit=args.test_limit, memory_format=name)
                history = run_trial(config, data_ref, name=f"{name}-{round_index}",
                                    storage_path=storage, max_failures=0).return_value
                epoch_s[name] += [row["epoch_time_s"] for row in history]
                if name == "auto":
                    auto_rows.append(history[0])
        ray.shutdown()
    chosen = {row["memory_format"] for row in auto_rows}
    figures = {
        "workers": args.workers, "global_batch_size": args.batch_size, "epochs": args.epochs,
        "rounds": args.rounds, "train_limit": args.train_limit,
        "auto_speedup_over_nchw": median(epoch_s["nchw"]) / median(epoch_s["auto"]),
        "auto_epoch_s": median(epoch_s["auto"]), "nchw_epoch_s": median(epoch_s["nchw"]),
        "auto_chose": "/".join(sorted(chosen)),
        # Per auto trial, (NCHW, channels-last) seconds a step, the workers' mean: the
        # first trial's workers time both; the later ones read the one timing the
        # node kept (the last worker to write it), all alike.
        "auto_trials_step_s": [[row["layout_nchw_step_s"], row["layout_channels_last_step_s"]]
                               for row in auto_rows],
    }
    emit("memory_format", command_line(), figures, append=not args.no_append)


if __name__ == "__main__":
    main()
