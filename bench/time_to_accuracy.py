"""Benchmark 7: time to accuracy, the configuration a sweep recommends against the book's recipe.

Reads the recommendation of a `--preset time-to-accuracy` sweep from its
folder (the trial that reached the target in the fewest training seconds),
then runs it and the book's recipe (LeNet, batch 256, lr 0.2, plain SGD, on
as many workers), alternately, `--runs` times each, each as a sweep of one
trial the way the preset ran it: evaluated 4 times an epoch, ended by Tune at
the target. Figures: the median training seconds to the target (evaluation
excluded), wall seconds from the trial's start, epochs, and the ratio.
Target: 0.80 test accuracy within 20 s of training on 2 CPU cores.

    python experiments/sweep.py --preset time-to-accuracy --out results/tta
    python bench/time_to_accuracy.py --sweep results/tta [--runs 3]
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd
import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data  # noqa: E402
from orchestrator.config.grid import SweepConfig  # noqa: E402
from orchestrator.records import counted  # noqa: E402
from orchestrator.report.summary import summarize_trials  # noqa: E402
from orchestrator.driver.rundir import SWEEP_FILE  # noqa: E402
from orchestrator.driver.tune_experiment import run_experiment  # noqa: E402
from orchestrator.driver.tune_results import collect  # noqa: E402
from orchestrator.report.time_to_accuracy import ranking  # noqa: E402

TARGET_ACC = 0.80
TARGET_TRAIN_S = 20.0
RECIPE = {"batch_sizes": (256,), "lrs": (0.2,), "momentums": (0.0,), "batch_scaling": "global",
          "lr_scaling": "none", "warmup_epochs": 0, "model": "lenet", "sync": ("scratch",),
          "split": ("even",), "precision": ("fp32",)}


def recommended(sweep_dir: Path) -> tuple[SweepConfig, pd.Series]:
    """The sweep's options and its top-ranked trial (trials.csv)."""
    stored = json.loads((sweep_dir / SWEEP_FILE).read_text())
    table = ranking(pd.read_csv(sweep_dir / "trials.csv"))
    if table.empty:
        sys.exit(f"no trial of {sweep_dir} reached its target: nothing to benchmark")
    return SweepConfig.from_dict(stored["sweep"]), table.iloc[0]


def one_trial(base: dict, axes: dict, target_acc: float, num_epochs: int) -> dict:
    """A one-point sweep, ended at the target, as the preset runs its trials."""
    return SweepConfig.from_dict({**base, **axes, "target_acc": target_acc, "num_epochs": num_epochs,
                                  "stop_at_target": True, "scheduler": "fifo"})


def time_to_target(sweep: SweepConfig, data_ref: ray.ObjectRef) -> dict:
    with tempfile.TemporaryDirectory() as storage:
        result_grid = run_experiment(sweep, data_ref, storage_path=storage, sweep_id="bench",
                                max_concurrent=1, resume=False)
        trials, epochs, evaluations = collect(result_grid, sweep, storage, sweep_id="bench")
        summary = summarize_trials(trials, epochs, evaluations, sweep.base.target_acc)
    row = summary.iloc[0]
    outcome = (f"{row['train_s_to_target']:.1f} s of training to {sweep.base.target_acc:g}"
               if pd.notna(row["train_s_to_target"]) else
               f"did not reach {sweep.base.target_acc:g} in {row['train_s_run']:.1f} s of training")
    print(f"{counted(row['num_workers'], 'worker')}, batch {row['global_batch_size']}, "
          f"lr {row['lr']:g}, "
          f"momentum {row['momentum']:g}: {outcome} [{row['status']}]", flush=True)
    return {**{key: None if pd.isna(row[key]) else float(row[key])
               for key in ("train_s_to_target", "wall_s_to_target", "epochs_to_target",
                           "train_s_run")},
            # What --memory-format auto chose on this machine; epochs.csv has it, and
            # a trial stopped at the target within its first epoch has no epoch row.
            "memory_format": " ".join(sorted(set(epochs["memory_format"].dropna())))
                             or "not recorded (stopped within epoch 1)"}


def _median_of_known(values) -> float | None:
    """The median of the runs that have the figure: one that never reached the
    target has no time to it."""
    known = [value for value in values if value is not None]
    return median(known) if known else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", type=Path, required=True,
                        help="the folder of a --preset time-to-accuracy sweep")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--recipe-epochs", type=int, default=15,
                        help="the recipe's cap; it reached 0.80 in its 7th epoch before")
    parser.add_argument("--target-acc", type=float, default=TARGET_ACC)
    parser.add_argument("--train-limit", type=int, default=None, help="smoke runs only")
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    sweep, best = recommended(args.sweep)
    base = sweep.to_dict()
    if args.train_limit is not None:
        base["train_limit"] = args.train_limit
    chosen = one_trial(base, {"workers": (int(best["num_workers"]),),
                              "batch_sizes": (int(best["global_batch_size"]),),
                              "batch_scaling": "global", "lr_scaling": "none",
                              "lrs": (float(best["lr"]),), "momentums": (float(best["momentum"]),),
                              # What else the ranking tells trials apart by: this trial's own.
                              "model": best["model"], "sync": (best["sync"],),
                              "split": (best["split"],), "precision": (best["precision"],)},
                       args.target_acc, sweep.base.num_epochs)
    recipe = one_trial(base, {**RECIPE, "workers": (int(best["num_workers"]),)},
                       args.target_acc, args.recipe_epochs)
    ray_cluster.connect(None)
    data_ref = ray.put(data.load(train_limit=chosen.base.train_limit,
                                 test_limit=chosen.base.test_limit))
    runs: dict[str, list[dict]] = {"recommended": [], "recipe": []}
    for _ in range(args.runs):  # alternately, so that both see the same machine
        runs["recommended"].append(time_to_target(chosen, data_ref))
        runs["recipe"].append(time_to_target(recipe, data_ref))
    ray.shutdown()
    figures = {"target_acc": args.target_acc,
               "recommended": (f"{counted(best['num_workers'], 'worker')}, batch "
                               f"{best['global_batch_size']}, "
                               f"lr {best['lr']:g}, momentum {best['momentum']:g}, "
                               f"{best['model']}, {best['sync']}, {best['split']} split, "
                               f"{best['precision']}"),
               "threads_per_worker": chosen.base.threads_per_worker,
               "memory_format_option": chosen.base.memory_format,
               "evals_per_epoch": chosen.base.evals_per_epoch}
    for name, results in runs.items():
        for key in ("train_s_to_target", "wall_s_to_target", "epochs_to_target", "train_s_run"):
            figures[f"{name}_{key}"] = _median_of_known(result[key] for result in results)
        figures[f"{name}_memory_format"] = " ".join(sorted({result["memory_format"]
                                                            for result in results}))
        reached = sum(result["train_s_to_target"] is not None for result in results)
        figures[f"{name}_runs_reached"] = f"{reached} of {len(results)}"
    recommended_s, recipe_s = (figures["recommended_train_s_to_target"],
                               figures["recipe_train_s_to_target"])
    figures["recipe_over_recommended"] = (recipe_s / recommended_s
                                          if recommended_s and recipe_s else None)
    figures["target"] = f"{TARGET_ACC:.2f} test acc within {TARGET_TRAIN_S:g} s of training"
    figures["target_met"] = bool(args.target_acc >= TARGET_ACC and recommended_s is not None
                                 and recommended_s <= TARGET_TRAIN_S)
    emit("time_to_accuracy", command_line(), figures,
         append=not args.no_append and args.train_limit is None)


if __name__ == "__main__":
    main()
