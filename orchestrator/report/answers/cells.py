"""A part's trials, and the replicas (seeds) of one configuration averaged into
one cell, with how many seeds stand behind it, its throughput and its speedup:
what the answers read their numbers from."""

import math
import warnings

import numpy as np
import pandas as pd

from orchestrator.records import Status
from orchestrator.report.noise_scale import learned

# What a cell averages over its replicas; the rest is the configuration's own.
MEASURES = ["epoch_s", "mean_epoch_time_s", "eval_s", "final_test_acc",
            "best_test_acc", "samples_per_s", "sync_share", "speedup", "efficiency"]


def part_trials(summary: pd.DataFrame, part: str) -> pd.DataFrame:
    """The trials made for `part` by the exercises study, failed ones left out; in a
    sweep whose trials carry no part (a plain grid, the quickstart), those whose
    configuration is the part's."""
    usable = summary["status"] != Status.FAILED
    # trials.csv read back holds no part as NaN (a float column when no trial has one)
    parts = summary["part"].astype(object).fillna("")
    if (parts[usable] != "").any():
        return summary[usable & (parts == part)]  # one selection: each costs every column
    return _matching(summary[usable], part)


def _matching(trials: pd.DataFrame, part: str) -> pd.DataFrame:
    """An untagged sweep's trials that do what the exercises study's `part` does. The
    parts but batch-lr keep one batch, lr, momentum and precision: the book's recipe
    where the sweep ran it, else its first trial's."""
    if trials.empty:
        return trials
    plain = ((trials["split"] == "even") & (trials["straggler_slowdown"] == 1)
             & (trials["threads_per_worker"] == 1) & (trials["warmup_epochs"] == 0)
             & (trials["model"] == "lenet"))
    book = trials[trials["book_recipe"].astype(bool)] if "book_recipe" in trials else trials[:0]
    reference = (book if len(book) else trials).iloc[0]
    same = {key: trials[key] == reference[key]
            for key in ("batch_size", "base_lr", "momentum", "precision")}
    kept = same["batch_size"] & same["momentum"] & same["precision"]
    matches = {
        "batch-global": plain & (trials["batch_scaling"] == "global")
                        & (trials["sync"] == "scratch") & kept & same["base_lr"],
        "batch-lr": plain & (trials["batch_scaling"] == "per-worker")
                    & (trials["sync"] == "scratch") & kept,
        "strategies": plain & (trials["batch_scaling"] == "global")
                      & ~trials["sync"].isin(["scratch", "delayed"]) & kept & same["base_lr"],
        "split": (trials["straggler_slowdown"] > 1) & kept & same["base_lr"],
        "threads": (trials["num_workers"] == 1) & (trials["threads_per_worker"] > 1) & kept,
        "warmup": (trials["warmup_epochs"] > 0) & (trials["batch_scaling"] == "per-worker"),
        "resnet18": trials["model"] == "resnet18",
        "delayed": (trials["sync"] == "delayed") & kept,
    }
    return trials[matches[part]]


def timed(trials: pd.DataFrame) -> pd.DataFrame:
    """Those with at least one epoch timed, fewest workers first."""
    return trials.dropna(subset=["mean_epoch_time_s"]).sort_values("num_workers")


def cell(trials: pd.DataFrame) -> pd.Series | None:
    """Replicas of one configuration as one row: each measure the mean over seeds (trials
    of one seed averaged first), `seeds` their count; None for no trials."""
    if trials.empty:
        return None
    # The answers build thousands of cells; pandas' groupby and a Series written key by
    # key cost ten times the arithmetic, so the means are numpy's (as groupby: NaN
    # skipped, seeds in order, a trial without a seed in none).
    measures = [column for column in MEASURES if column in trials]
    seed = trials["seed"].to_numpy()
    has_seed = ~pd.isna(seed)
    seeds, which = np.unique(seed[has_seed], return_inverse=True)
    per_seed = _group_means(trials[measures].to_numpy(dtype=float)[has_seed], which, len(seeds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a measure no seed has: NaN
        means = np.nanmean(per_seed, axis=0) if len(seeds) else np.full(len(measures), math.nan)
    row = trials.iloc[0].to_dict()
    row.update(zip(measures, means.tolist()))
    row["seeds"] = len(seeds)
    row["trial_ids"] = tuple(trials["trial_id"]) if "trial_id" in trials else ()
    # Each seed's times and accuracy, for comparisons made seed for seed
    # (`sides.matched`, `Noise.seed_test`).
    row["seed_ids"] = tuple(seeds.tolist())
    row["by_seed"] = {column: tuple(per_seed[:, measures.index(column)].tolist())
                      for column in ("epoch_s", "eval_s", "final_test_acc")
                      if column in measures}
    if {"epoch_s", "sync_share"} <= set(measures):
        row["by_seed"]["sync_s"] = tuple((per_seed[:, measures.index("epoch_s")]
                                          * per_seed[:, measures.index("sync_share")]).tolist())
    accs = (per_seed[:, measures.index("final_test_acc")] if "final_test_acc" in measures
            else None)
    failed = np.zeros(len(seeds), dtype=bool)
    np.logical_or.at(failed, which, ~learned(trials).to_numpy(dtype=bool)[has_seed])
    row["not_learned"] = int(failed.sum())
    row["learned_seed_ids"] = tuple(seeds[~failed].tolist())
    row["learned_acc"] = (_nanmean(accs[~failed]) if accs is not None and (~failed).any()
                          else math.nan)
    if "baseline_rate" in row and not pd.isna(row.get("epoch_s")):
        # The cell's own throughput and speedup, from its mean epoch: a speedup
        # printed beside the cell's and its baseline's epoch times is their ratio.
        row["samples_per_s"] = rate(row)
        if not pd.isna(row["speedup"]):
            row["speedup"] = row["samples_per_s"] / row["baseline_rate"]
            row["efficiency"] = row["speedup"] / row["num_workers"]
    return pd.Series(row, name=trials.index[0])


def _group_means(values: np.ndarray, which: np.ndarray, groups: int) -> np.ndarray:
    """Each group's column means of `values` (rows of group `which`), NaN skipped; NaN
    where a group has no number in a column."""
    known = ~np.isnan(values)
    sums = np.zeros((groups, values.shape[1]))
    counts = np.zeros((groups, values.shape[1]))
    np.add.at(sums, which, np.where(known, values, 0.0))
    np.add.at(counts, which, known)
    with np.errstate(invalid="ignore"):
        return sums / counts


def _nanmean(values: np.ndarray) -> float:
    """The mean of the numbers in `values`; NaN where there are none."""
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else math.nan


def cells(trials: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One `cell` per value of `keys`, in their order."""
    if trials.empty:
        return trials.assign(seeds=pd.Series(dtype=int))
    rows = [cell(group) for _, group in trials.groupby(keys, sort=True)]
    return pd.DataFrame(rows).reset_index(drop=True)


def rate(row: pd.Series) -> float:
    """A trial's or a cell's throughput in the timing window: its epoch's examples
    over `epoch_s`."""
    return row["steps_per_epoch"] * row["global_batch_size"] / row["epoch_s"]


def sync_seconds(row: pd.Series) -> float:
    """A cell's (or trial's) seconds an epoch in gradient sync: its sync share of its
    epoch time, as `sides_of(..., "sync_s")` takes each seed's."""
    return row["sync_share"] * row["epoch_s"]


def speedup_over(many: pd.Series, one: pd.Series) -> float:
    """`many`'s throughput over `one`'s: the ratio of the two epoch times printed
    beside it (each epoch the same examples, its steps of one global batch)."""
    if shares_gpu(many):
        return math.nan  # workers that shared a GPU took turns on it
    return rate(many) / rate(one)


def shares_gpu(row) -> bool:
    """Whether a cell's (or trial's) workers shared a GPU (`summary.shared_gpu_trials`):
    they took turns on it, and summed through the host; no speedup is read."""
    shared = row.get("shared_gpu", False)
    return bool(pd.notna(shared) and shared)


def speedup_text(row, speedup: float) -> str:
    """"speedup 1.67", or why none is printed: the row's workers shared one GPU, or no
    1-worker trial of the same work ran."""
    if shares_gpu(row):
        return "no speedup read, its workers sharing one GPU"
    if pd.isna(speedup):
        return "no speedup (no 1-worker trial of the same work)"
    return f"speedup {speedup:.2f}"


def with_speedups(table: pd.DataFrame, group: list[str]) -> pd.DataFrame:
    """A table of cells with each row's speedup and efficiency against the 1-worker
    row of its `group` in the same table (NaN without one): every speedup shown is
    the ratio of two epoch times shown."""
    # A fresh index: a table concatenated from two (13.5.1's arms) repeats its labels,
    # and one row's speedup written by label would land on the other arm's row too.
    table = table.reset_index(drop=True)
    for _, rows in table.groupby(group, sort=False, dropna=False):
        ones = rows[rows["num_workers"] == 1]
        for index, row in rows.iterrows():
            table.loc[index, "speedup"] = (speedup_over(row, ones.iloc[0]) if len(ones)
                                           else math.nan)
    table["efficiency"] = table["speedup"] / table["num_workers"]
    return table


def at_workers(trials: pd.DataFrame, num_workers: int) -> pd.Series | None:
    """The cell of `num_workers`' trials (replicas of one configuration), or None."""
    return cell(trials[trials["num_workers"] == num_workers])


def none_learned(cell_row) -> bool:
    """Whether no seed of a cell learned (`cell`'s `not_learned` of its `seeds`)."""
    return int(cell_row["not_learned"]) >= int(cell_row["seeds"])
