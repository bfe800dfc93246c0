"""The report's tables: each a frame, rendered as markdown with the columns that
vary between its rows; what every row shares is said once above it.
"""

import math

import pandas as pd

from orchestrator.records import Status
from orchestrator.report.summary import (ISOLATION_CELL, SCALING_GROUP, STRATEGY_CELL,
                                         per_worker_text, shared_gpu_mask)


# What a row of each table is (its key columns); the other columns are measured.
# A scaling row's trials do the same work each epoch: they may differ in the seed,
# the lr and its warm-up, and the number of epochs.
SCALING_KEYS = [*SCALING_GROUP, "num_workers", "transport", "global_batch_size"]
SPLIT_KEYS = ["sync", "split", "num_workers", "last_epoch"]
ISOLATION_KEYS = [*ISOLATION_CELL, "lrs_searched"]


def scaling_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Workers against time per epoch, throughput, speedup and efficiency: one row per
    setup, each the mean over its trials (the same work each epoch: `SCALING_KEYS`),
    with their count and the relative range of their epoch times."""
    usable = _with_keys(summary[summary["status"] != Status.FAILED], SCALING_KEYS)
    if usable.empty:
        return pd.DataFrame(columns=[*SCALING_KEYS, "trials", "epoch_s"])
    table = usable.groupby(SCALING_KEYS, sort=True, dropna=False).agg(
        trials=("trial_id", "count"), epoch_s=("epoch_s", "mean"),
        epoch_time_spread=("epoch_s", relative_range),
        samples_per_s=("samples_per_s", "mean"), sync_share=("sync_share", "mean"),
        speedup=("speedup", "mean"), efficiency=("efficiency", "mean"),
        examples=("epoch_examples", "mean"), baseline_rate=("baseline_rate", "first"))
    # The row's throughput and speedup are its mean epoch's: a speedup printed beside
    # two rows' epoch times is their ratio (summary.with_speedup's baseline).
    examples = table.pop("examples")
    has_speedup = table["speedup"].notna()
    table["samples_per_s"] = examples / table["epoch_s"]
    table["speedup"] = (table["samples_per_s"] / table.pop("baseline_rate")).where(has_speedup)
    table["efficiency"] = table["speedup"] / table.index.get_level_values("num_workers")
    shared = shared_gpu_mask(usable)
    if shared.any():  # which rows' workers took turns on one GPU: why they have no speedup
        table["shared_gpu"] = shared.groupby(
            [usable[key] for key in SCALING_KEYS], sort=True, dropna=False).any()
    return table.reset_index()


def strategy_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, split, precision and worker count, on equal work (`STRATEGY_CELL`:
    the same threads, straggler, transport and global batch): seconds per epoch, sync
    share and speedup, each the median over that cell's trials (other lrs and seeds),
    with the relative range of their epoch times."""
    usable = _with_keys(summary[summary["status"] != Status.FAILED], STRATEGY_CELL)
    if usable.empty:
        return pd.DataFrame()
    table = usable.groupby(STRATEGY_CELL, sort=True, dropna=False).agg(
        trials=("trial_id", "count"), epoch_s=("epoch_s", "median"),
        epoch_time_spread=("epoch_s", relative_range),
        sync_share=("sync_share", "median"), speedup=("speedup", "median"))
    return table.reset_index()


def relative_range(values: pd.Series) -> float:
    """The slowest over the fastest of repeated measurements, minus 1 (the answers'
    time noise's scale); NaN for fewer than two."""
    values = values.dropna()
    return values.max() / values.min() - 1 if len(values) > 1 else math.nan


def split_table(summary: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """For each trial of several workers: each worker's share of the global batch
    and its forward+backward seconds, in the first and the last epoch (a
    proportional split starts even and re-sets the shares from the first)."""
    rows = []
    for row in summary[summary["num_workers"] > 1].itertuples():
        history = epochs[epochs["trial_id"] == row.trial_id].sort_values("epoch")
        if history.empty or "worker_shares" not in history:
            continue
        first, last = history.iloc[0], history.iloc[-1]
        rows.append({"trial_id": row.trial_id, "sync": row.sync, "split": row.split,
                     "num_workers": row.num_workers,
                     "first_epoch_shares": per_worker_text(first["worker_shares"], "g"),
                     "first_epoch_compute_s": per_worker_text(first["worker_compute_s"], ".2f"),
                     "last_epoch": int(last["epoch"]),
                     "last_epoch_shares": per_worker_text(last["worker_shares"], "g"),
                     "last_epoch_compute_s": per_worker_text(last["worker_compute_s"], ".2f")})
    return pd.DataFrame(rows)


def isolation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """For each (workers, batch, epochs, warm-up) cell, the best learning rate by the
    mean final test accuracy over its replicas (seeds, each counted once), their
    count and range, and whether the best sits on the edge of the lrs searched (then
    the range was too narrow); `best_base_lr` is the grid's lr it was scaled from."""
    rows = []
    summary = _with_keys(summary, ISOLATION_CELL)
    for cell, group in summary.groupby(ISOLATION_CELL, sort=True, dropna=False):
        # By the lr trained at: the exercises' warm-up and delayed arms share a
        # base lr across lrs (scaled or halved from it).
        searched = sorted(group["lr"].unique())
        usable = group[group["status"].isin([Status.FINISHED, Status.STOPPED_EARLY, Status.REACHED_TARGET])].dropna(
            subset=["final_test_acc"])
        row = dict(zip(ISOLATION_CELL, cell))
        row["lrs_searched"] = " ".join(f"{lr:g}" for lr in searched)
        if usable.empty:
            row.update(best_base_lr=math.nan, best_lr=math.nan, best_final_test_acc=math.nan,
                       trials=0, acc_range=math.nan, on_edge="no usable trial")
        else:
            # Trials of one seed (strategies that sum alike) count once.
            # (A trials.csv from before seeds were recorded: each trial its own.)
            seed = "seed" if "seed" in usable else "trial_id"
            seeds = usable.groupby(["lr", seed]).agg(
                base_lr=("base_lr", "first"), acc=("final_test_acc", "mean")).reset_index()
            per_lr = seeds.groupby("lr").agg(
                base_lr=("base_lr", "first"), acc=("acc", "mean"),
                trials=("acc", "count"), acc_range=("acc", _range))
            best_lr = per_lr["acc"].idxmax()
            best = per_lr.loc[best_lr]
            row.update(best_base_lr=best["base_lr"], best_lr=best_lr,
                       best_final_test_acc=best["acc"], trials=int(best["trials"]),
                       acc_range=best["acc_range"], on_edge=_edge_flag(best_lr, searched))
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(no rows)"
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(_cell(value) for value in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def varying_table(frame: pd.DataFrame, keys: list[str]) -> str:
    """`markdown_table` of the columns that tell rows apart: a key column (what a
    row is, not what it measured) with one value in every row is named once above
    the table instead. A table of one row is shown whole."""
    shared = [key for key in keys if key in frame and len(frame) > 1
              and frame[key].nunique(dropna=False) == 1]
    if not shared:
        return markdown_table(frame)
    line = "Every row: " + ", ".join(f"{key} {_cell(frame[key].iloc[0])}" for key in shared) + "."
    return line + "\n\n" + markdown_table(frame.drop(columns=shared))


def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _with_keys(summary: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`summary` with every key column: one a trials.csv of an earlier version lacks
    reads "not recorded" (a summary of today's code has them all)."""
    missing = {key: "not recorded" for key in keys if key not in summary}
    return summary.assign(**missing) if missing else summary


def _range(values: pd.Series) -> float:
    return values.max() - values.min() if len(values) > 1 else math.nan


def _edge_flag(best: float, searched: list[float]) -> str:
    if len(searched) == 1:
        return "only one lr searched"
    if best == searched[0]:
        return "yes (lowest)"
    if best == searched[-1]:
        return "yes (highest)"
    return "no"
