"""Benchmark: what each tracker (--tracking) costs a sweep's trial.

The same small sweep (1 worker, one trial at a time) runs without a tracker,
then with each of MLflow (a SQLite store), TensorBoard and W&B (offline), on
one embedded Ray, after a sweep that is not counted (the first trial process's
start). Per setting: seconds per epoch as the trial lives them (Tune's time
from one report to the next, past the first: Tune's driver runs the
callbacks between two of a trial's reports), the epochs' own training
seconds (the workers' clock), and the sweep's wall seconds per trial. The baseline already
writes TensorBoard files: Tune adds its TBXLoggerCallback by default when
tensorboardX is installed, as ray[tune] installs it.

    python bench/tracking.py [--trials 2] [--epochs 3] [--train-limit 4096] [--smoke]

Use at least 2 epochs: the first report of a trial holds its start.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.config.grid import TRACKERS, SweepConfig  # noqa: E402
from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.driver import tracking  # noqa: E402
from orchestrator.driver.tune_experiment import run_experiment  # noqa: E402
from orchestrator.driver.tune_results import collect  # noqa: E402
from orchestrator.training import data  # noqa: E402


def timed_sweep(sweep: SweepConfig, data_ref: ray.ObjectRef) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        storage = str(Path(folder) / "ray")
        trackers = tracking.resolve(sweep, out_dir=Path(folder), storage_location=storage,
                                    sweep_id="bench")
        started = time.monotonic()
        result_grid = run_experiment(sweep, data_ref, storage_path=storage, sweep_id="bench",
                                     max_concurrent=1, resume=False, trackers=trackers)
        wall_s = time.monotonic() - started
        trials, epochs, _ = collect(result_grid, sweep, storage, sweep_id="bench")
        # Tune's seconds from one report to the next, past the first (which holds
        # the trial's start): an epoch and the callbacks' work on the one before.
        iteration_s = [seconds for result in result_grid
                       for seconds in result.metrics_dataframe["time_this_iter_s"][1:]]
    assert len(epochs) == len(trials) * sweep.base.num_epochs, "every trial runs every epoch"
    return {"trial_s_per_epoch": median(iteration_s),
            "epoch_time_s": median(epochs["epoch_time_s"]),
            "wall_s_per_trial": wall_s / len(trials)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-limit", type=int, default=4096)
    parser.add_argument("--smoke", action="store_true",
                        help="a check of the script: its figures are not kept")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: a trial's first epoch holds its start")
    # Offline: a benchmark never uploads, and needs no W&B account.
    os.environ["WANDB_MODE"] = "offline"
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the sweep folder's SQLite file
    options = dict(workers=(1,), batch_sizes=(64,), num_epochs=args.epochs,
                   lrs=tuple(0.05 * (index + 1) for index in range(args.trials)),
                   train_limit=args.train_limit, test_limit=500)
    ray_cluster.connect(None)
    try:
        data_ref = ray.put(data.load(train_limit=args.train_limit, test_limit=500))
        # A first sweep, not counted, pays the first trial process's start and imports.
        timed_sweep(SweepConfig.from_dict(options), data_ref)
        settings = {"none": ()} | {tracker: (tracker,) for tracker in TRACKERS}
        measured = {name: timed_sweep(SweepConfig.from_dict({**options, "tracking": trackers}),
                                      data_ref)
                    for name, trackers in settings.items()}
    finally:
        ray.shutdown()
    base = measured["none"]
    figures = {"trials": args.trials, "epochs": args.epochs, "train_limit": args.train_limit}
    for name, values in measured.items():
        figures |= {f"{name}_{key}": round(value, 3) for key, value in values.items()}
        if name != "none":
            figures[f"{name}_extra_s_per_epoch"] = round(
                values["trial_s_per_epoch"] - base["trial_s_per_epoch"], 3)
            figures[f"{name}_extra_s_per_trial"] = round(
                values["wall_s_per_trial"] - base["wall_s_per_trial"], 3)
    emit("tracking", command_line(), figures, append=not args.smoke)


if __name__ == "__main__":
    main()
