"""13.5.2's lr search read from a sweep's trials (part batch-lr): its trials, the
table of each lr's accuracy per worker count, and which lr is best there, told
apart from the others or not, and how it moved with the batch. 13.5.1 reads the
same trials."""

from typing import NamedTuple

import numpy as np
import pandas as pd

from orchestrator.records import counted
from orchestrator.report.answers.cells import cells, none_learned, part_trials
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.compare import acc_gap, seed_accuracies, told_apart
from orchestrator.report.answers.wording import seeds_text


def lr_trials(summary: pd.DataFrame) -> pd.DataFrame:
    """Part batch-lr, and batch-global's 1-worker trials: at 1 worker a batch of b per
    worker is the global batch b, the same run (the study runs it once). Empty without
    a trial of batch-lr's own."""
    per_worker = part_trials(summary, "batch-lr")
    if per_worker.empty:
        return per_worker
    fixed_global = part_trials(summary, "batch-global")
    return pd.concat([per_worker, fixed_global[fixed_global["num_workers"] == 1]])


def lr_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per worker count of part batch-lr: each lr's final test accuracy (the mean over
    its seeds), the best lr, whether it is on the edge of the lrs searched, and the
    seeds behind each mean."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    if trials.empty:
        return pd.DataFrame()
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])
    table = means.pivot_table(index=["num_workers", "global_batch_size"], columns="lr",
                              values="final_test_acc").reset_index()
    lrs = [column for column in table.columns if isinstance(column, float)]
    table["best_lr"] = [lrs[index] for index in np.nanargmax(table[lrs].to_numpy(), axis=1)]
    table["on_edge"] = [_edge(row, lrs) for _, row in table.iterrows()]
    seeds = means.groupby("num_workers")["seeds"].agg(["min", "max"])
    table["seeds"] = [f"{seeds.loc[k, 'min']}" if seeds.loc[k, "min"] == seeds.loc[k, "max"]
                      else f"{seeds.loc[k, 'min']}-{seeds.loc[k, 'max']}"
                      for k in table["num_workers"]]
    return table.rename(columns={lr: f"lr {lr:g}" for lr in lrs})


def best_lr_moved(table: pd.DataFrame, summary: pd.DataFrame, ties: dict) -> list[str]:
    """How the best lr moved from 1 worker's batch to each larger one, against the
    linear rule's k-fold; nothing where a count searched one lr, or its best did not
    learn (a best among failures is none), and hedged where the best is tied within
    the noise (`ties`, by worker count) or at the grid's edge."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])

    def usable(row) -> bool:
        best = means[(means["num_workers"] == row["num_workers"])
                     & np.isclose(means["lr"], row["best_lr"])]
        return (row["on_edge"] != "only one lr" and not best.empty
                and int(best["not_learned"].iloc[0]) < int(best["seeds"].iloc[0]))

    one = table.iloc[0]
    if not usable(one):
        return []
    sentences = []
    for _, row in table.iloc[1:].iterrows():
        if not usable(row):
            continue
        factor = row["global_batch_size"] / one["global_batch_size"]
        rule_lr = factor * one["best_lr"]
        moved = (f"stayed at {row['best_lr']:g}" if np.isclose(row["best_lr"], one["best_lr"])
                 else f"moved from {one['best_lr']:g} to {row['best_lr']:g}")
        edge = bool({row["on_edge"], one["on_edge"]} & {"lowest", "highest"})
        if one["num_workers"] in ties or row["num_workers"] in ties:
            # Unresolved: the finding is that the sweep cannot say, not where the best went.
            sentences.append(
                f"With {factor:g} times the batch the highest mean accuracy was at lr "
                f"{row['best_lr']:g} (at 1 worker {one['best_lr']:g}; the linear scaling rule "
                f"would put it at {rule_lr:g}), but a best not told apart from another lr "
                f"(below) leaves open whether the best lr moved"
                + ("; and one at the edge of the lrs searched is only a bound" if edge else "")
                + ".")
            continue
        caveats = ["a best at the edge of the lrs searched, so only a bound"] if edge else []
        sentences.append(
            f"With {factor:g} times the batch the best lr {moved}, "
            + ("as the linear scaling rule says (k times the lr for k times the batch)"
               if np.isclose(row["best_lr"], rule_lr) else
               f"not {rule_lr:g} as the linear scaling rule would have it")
            + "".join(f"; {text}" for text in caveats) + ".")
    return sentences


def best_lr_ties(table: pd.DataFrame, lr_columns: list[str], summary: pd.DataFrame,
                  noise: Noise) -> tuple[dict, list[str], int]:
    """Per worker count, the lrs not told apart from the best: as the linear rule's
    pairs are, by `Noise.seed_test` on their seeds (`compare.told_apart`), else by
    the sweep's accuracy noise; an lr with a seed that did not learn is not tested,
    and said so. Returns the ties (a
    clause per worker count, by worker count), the lrs told apart (a clause each),
    the most seeds behind any of the tied means and the widest gap a t test left
    tied, with the test and the two sides' seed counts (None where none)."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])
    ties, apart, most_seeds, widest = {}, [], 1, None
    for _, row in table.iterrows():
        best = f"lr {row['best_lr']:g}"
        if _none_learned_at(means, _Cell(row["num_workers"], row["global_batch_size"],
                                         row["best_lr"])):
            continue  # every lr failed here: nothing to tell apart
        here = {column: _Cell(row["num_workers"], row["global_batch_size"], float(column[3:]))
                for column in lr_columns if not np.isnan(row[column])}
        seeds = {column: seed_accuracies(_cell_at(means, key)) for column, key in here.items()}
        close, tied = [], [best]
        for column, key in here.items():
            if column == best:
                continue
            workers = counted(row["num_workers"], "worker")
            at = f"at {workers} {best} ({row[best]:.3f}) above {column}"
            if _none_learned_at(means, key):
                # A failure to learn is the difference; a t test on chance says nothing.
                apart.append(f"{at} ({row[column]:.3f}: no seed of "
                             f"{len(seeds[column])} learned)")
                continue
            failed = [_failed_seeds_at(means, here[name]) for name in (best, column)]
            if any(failed):
                # Some seeds did not learn: a failure to name, not a spread to test.
                close.append(f"{column} ({row[column]:.3f}; not tested: "
                             + ", ".join(f"{count} of {name}'s seeds did not learn"
                                         for name, count in zip((best, column), failed) if count)
                             + ")")
                tied.append(column)
                continue
            test = noise.seed_test(seeds[best], seeds[column],
                                   rows=(_cell_at(means, here[best]), _cell_at(means, key)))
            if test is not None:
                figures = test.text((len(seeds[best]), len(seeds[column])))
                if told_apart(row[best] - row[column], noise, test):
                    apart.append(f"{at} ({row[column]:.3f}; {figures})")
                else:
                    close.append(f"{column} ({row[column]:.3f}; {figures})")
                    tied.append(column)
                    gap = abs(acc_gap(row[best], row[column], test))
                    if widest is None or gap > widest[0]:
                        widest = (gap, test, (len(seeds[best]), len(seeds[column])))
            else:
                within = not told_apart(row[best] - row[column], noise)
                text = (f"{row[column]:.3f}, {seeds_text(len(seeds[column]))}: "
                        f"{'within' if within else 'beyond'} the accuracy noise, "
                        f"{noise.acc_label()}")
                if within:
                    close.append(f"{column} ({text})")
                    tied.append(column)
                else:
                    apart.append(f"{at} ({text})")
        if close:
            most_seeds = max(most_seeds, *(len(seeds[column]) for column in tied))
            ties[row["num_workers"]] = (
                f"at {counted(row['num_workers'], 'worker')} the best, {best} "
                f"({row[best]:.3f}), is not "
                f"told apart from {', '.join(close)}")
    return ties, apart, most_seeds, widest


def _none_learned_at(means: pd.DataFrame, key: "_Cell") -> bool:
    """Whether no seed of the cell `key` learned."""
    row = _cell_at(means, key)
    return row is not None and none_learned(row)


def _failed_seeds_at(means: pd.DataFrame, key: "_Cell") -> int:
    """How many seeds of the cell `key` did not learn."""
    row = _cell_at(means, key)
    return 0 if row is None else int(row.get("not_learned", 0) or 0)


def _cell_at(means: pd.DataFrame, key: "_Cell") -> pd.Series | None:
    """The cell `key` among `cells`' rows in `means`; None where it did not run."""
    rows = means[(means["num_workers"] == key.num_workers)
                 & (means["global_batch_size"] == key.global_batch_size)
                 & np.isclose(means["lr"], key.lr)]
    return None if rows.empty else rows.iloc[0]


class _Cell(NamedTuple):
    """A batch-lr cell, as `_cell_at` finds it among `cells`' rows."""

    num_workers: int
    global_batch_size: int
    lr: float


def _edge(row: pd.Series, lrs: list[float]) -> str:
    """Whether the best lr is at an end of those searched at this worker count."""
    searched = [lr for lr in lrs if not np.isnan(row[lr])]
    if len(searched) < 2:
        return "only one lr"
    return ("lowest" if row["best_lr"] == searched[0]
            else "highest" if row["best_lr"] == searched[-1] else "no")

