"""Time to accuracy in a sweep's results: the three columns of trials.csv, the
report's ranking and recommendation (the plot against time is in plots.py).

DAWNBench's figure of merit: how soon a configuration gets a model of a given
quality, not how fast its epochs are. Training seconds exclude evaluation;
wall seconds count from the trial's start, worker start-up included.
"""

import math

import pandas as pd

from orchestrator.records import counted, first_reaching, seconds_text

TARGET_COLUMNS = ["epochs_to_target", "train_s_to_target", "wall_s_to_target"]
# What a row of the ranking is; the other columns are measured.
RANKING_KEYS = ["model", "num_workers", "global_batch_size", "lr", "momentum", "sync", "split",
                "precision", "book_recipe", "status"]
RANKING_COLUMNS = ["trial_id", *RANKING_KEYS[:-2], "epochs_to_target", "train_s_to_target",
                   "wall_s_to_target", "rank_by_wall", "book_recipe", "status"]


def target_columns(evaluations: pd.DataFrame, target_acc: float | None) -> pd.DataFrame:
    """Per trial (the index): when its test accuracy first reached `target_acc`, and
    `train_s_run`, the training seconds it ran in all; NaN where it never got there."""
    rows = {}
    for trial_id, group in evaluations.groupby("trial_id"):
        records = group.to_dict("records")
        reached = first_reaching(records, target_acc) if target_acc is not None else None
        rows[trial_id] = {
            "epochs_to_target": reached["epoch"] if reached else math.nan,
            "train_s_to_target": reached["train_s"] if reached else math.nan,
            "wall_s_to_target": reached["wall_s"] if reached else math.nan,
            "train_s_run": group["train_s"].max(),
        }
    return pd.DataFrame.from_dict(rows, orient="index",
                                  columns=[*TARGET_COLUMNS, "train_s_run"])


def ranking(summary: pd.DataFrame) -> pd.DataFrame:
    """The trials that reached the target, fastest in training seconds first, with
    their rank by wall seconds beside."""
    reached = summary.dropna(subset=["train_s_to_target"]).sort_values(
        ["train_s_to_target", "wall_s_to_target"]).copy()
    reached["rank_by_wall"] = reached["wall_s_to_target"].rank(method="min").astype(int)
    return reached[RANKING_COLUMNS].reset_index(drop=True)


def recommendation(summary: pd.DataFrame, target_acc: float) -> str:
    """The one line: the fastest configuration, against the book's recipe on this cluster."""
    table = ranking(summary)
    if table.empty:
        return f"No trial reached test accuracy {target_acc:g}."
    best = table.iloc[0]
    setup = "".join(f", {value}" for value in _swept_setup(best, summary))
    line = (f"{counted(best['num_workers'], 'worker')}, batch {best['global_batch_size']}, "
            f"lr {best['lr']:g} (momentum {best['momentum']:g}){setup} reached {target_acc:g} "
            f"in {seconds_text(best['train_s_to_target'])} s of training")
    recipe = summary[summary["book_recipe"].astype(bool)]
    recipe_reached = recipe.dropna(subset=["train_s_to_target"])
    if not recipe_reached.empty:
        # The recipe's best worker count: the comparison least flattering to us.
        baseline_s = recipe_reached["train_s_to_target"].min()
        return (f"{line}, {baseline_s / best['train_s_to_target']:.2f} times faster than the "
                f"book's recipe on this cluster ({seconds_text(baseline_s)} s).")
    if not recipe.empty and recipe["train_s_run"].notna().any():
        run_s = recipe["train_s_run"].max()
        return (f"{line}, more than {run_s / best['train_s_to_target']:.2f} times faster than "
                f"the book's recipe on this cluster, which had not reached it after "
                f"{seconds_text(run_s)} s of training.")
    return (f"{line}; the book's recipe (LeNet, batch 256, lr 0.2, plain SGD) was not run in "
            f"this sweep, so there is no baseline.")


def baseline_line(summary: pd.DataFrame, target_acc: float) -> str:
    """How the book's recipe did in this sweep, trial by trial."""
    recipe = summary[summary["book_recipe"].astype(bool)]
    if recipe.empty:
        return "The book's recipe (LeNet, batch 256, lr 0.2, plain SGD) was not in this sweep."
    return ("The book's recipe (LeNet, batch 256, lr 0.2, plain SGD): "
            + "; ".join(_recipe_outcome(row, target_acc) for row in recipe.itertuples()) + ".")


def _swept_setup(trial, summary: pd.DataFrame) -> list[str]:
    """The trial's model, sync strategy, split and precision, each only where the
    sweep had more than one: beside workers, batch, lr and momentum, what a
    sweep's axes tell trials apart by."""
    return [f"{column} {trial[column]}" for column in ("model", "sync", "split", "precision")
            if summary[column].nunique() > 1]


def _recipe_outcome(row, target_acc: float) -> str:
    where = counted(row.num_workers, "worker")
    if not math.isnan(row.train_s_to_target):
        return (f"{where} reached {target_acc:g} after "
                f"{counted(round(row.epochs_to_target, 2), 'epoch')}, "
                f"{seconds_text(row.train_s_to_target)} s of training "
                f"({seconds_text(row.wall_s_to_target)} s wall)")
    if math.isnan(row.train_s_run):
        return f"{where} did not run [{row.status}]"
    return (f"{where} did not reach it in {seconds_text(row.train_s_run)} s of training "
            f"[{row.status}]")
