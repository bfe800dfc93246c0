"""13.5's four exercises answered from a sweep's trials: a bigger minibatch on
k workers, the learning rate against k, a more efficient allreduce, and test
accuracy on several workers. Each function returns the answer's paragraphs.
Replicas (seeds) of a configuration are averaged into one cell (cells.cell)
and every number says how many stand behind it.
"""

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from orchestrator.records import ROOT_FUNNEL, seconds_text
from orchestrator.report.answers.cells import (at_workers, cell, cells, part_trials,
                                               speedup_over, timed, with_speedups)
from orchestrator.report.answers.compare import compare_acc, compare_cells, compare_times
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.welch import SIGNIFICANCE, Welch, welch
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, acc_seeds_text, counted,
                                                 learned_seeds_text, missing_part,
                                                 one_worker_count, percent, seeds_text)
from orchestrator.report.tables import markdown_table


def lr_trials(summary: pd.DataFrame) -> pd.DataFrame:
    """Part batch-lr, and batch-global's 1-worker trials: at 1 worker a batch of b per
    worker is the global batch b, the same run (the study runs it once). None without
    a trial of batch-lr's own."""
    per_worker = part_trials(summary, "batch-lr")
    if per_worker.empty:
        return per_worker
    fixed_global = part_trials(summary, "batch-global")
    return pd.concat([per_worker, fixed_global[fixed_global["num_workers"] == 1]])


def answer_13_5_1(summary: pd.DataFrame, noise: Noise) -> list[str]:
    fixed_global = timed(part_trials(summary, "batch-global"))
    if fixed_global.empty:
        return [missing_part("batch-global")]
    base_lr = fixed_global["base_lr"].iloc[0]
    per_worker = timed(lr_trials(summary))
    # 13.5's own lr, so that the two arms differ only in the batch.
    per_worker = per_worker[np.isclose(per_worker["base_lr"], base_lr)]
    threads = cell(timed(part_trials(summary, "threads")))
    wide_cells, fixed_cells = (cells(trials, ["num_workers"])
                               for trials in (per_worker, fixed_global))
    arms = with_speedups(pd.concat([
        wide_cells.assign(batch=wide_cells["batch_size"].map("{} per worker".format)),
        fixed_cells.assign(batch=fixed_cells["batch_size"].map("{} global".format))],
        ignore_index=True), ["batch"])
    columns = ["batch", "num_workers", "global_batch_size", "steps_per_epoch",
               "epoch_s", "speedup", "final_test_acc", "seeds"]
    if threads is not None:
        arms["speedup_vs_threads"] = arms["samples_per_s"] / threads["samples_per_s"]
        columns.insert(-2, "speedup_vs_threads")
    paragraphs = [markdown_table(arms[columns].reset_index(drop=True))]
    if arms["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(arms)]
    k = int(arms["num_workers"].max())
    sentences = []
    for label, trials in (("the per-worker batch", per_worker), ("the global batch", fixed_global)):
        one, many = at_workers(trials, 1), at_workers(trials, k)
        if one is None or many is None:
            sentences.append(f"There is no 1- and {k}-worker pair with {label} fixed: "
                             f"`{EXERCISES_COMMAND}` runs one.")
            continue
        sentences.append(
            f"Keeping {label} fixed (global batch {many['global_batch_size']} on {k} workers, "
            f"{many['steps_per_epoch']} steps per epoch), an epoch took "
            f"{seconds_text(many['epoch_s'])} s ({seeds_text(many['seeds'])}) against "
            f"{seconds_text(one['epoch_s'])} s on 1 worker ({seeds_text(one['seeds'])}, "
            f"{one['steps_per_epoch']} steps): speedup "
            f"{speedup_over(many, one):.2f}.")
    wide, fixed = at_workers(per_worker, k), at_workers(fixed_global, k)
    if wide is not None and fixed is not None:
        updates = (f"in {wide['epochs_run']} epochs it made "
                   f"{int(wide['epochs_run'] * wide['steps_per_epoch']):,} updates, the global "
                   f"batch's arm {int(fixed['epochs_run'] * fixed['steps_per_epoch']):,}")
        accuracy = (
            f"its final test accuracy, {wide['final_test_acc']:.3f} "
            f"({acc_seeds_text(wide)}), is a failure to train, not a gap to read: {updates}, "
            f"too few, at its lr, to leave the initial plateau"
            if _none_learned(wide) else
            f"its final test accuracy after {wide['epochs_run']} epochs, "
            f"{wide['final_test_acc']:.3f} ({acc_seeds_text(wide)}), was "
            f"{compare_cells(wide, fixed, noise)} "
            f"{fixed['final_test_acc']:.3f} ({acc_seeds_text(fixed)}): {updates}")
        sentences.append(
            f"At {k} workers the per-worker batch's epochs were "
            f"{compare_times(wide['epoch_s'], fixed['epoch_s'], noise)} the global batch's, "
            f"and {accuracy}; a global batch of {wide['global_batch_size']} makes fewer, "
            f"larger steps per epoch, so the same epochs make fewer updates (13.5.2 re-tunes "
            f"the lr).")
    if threads is not None:
        against = [f"{compare_times(arm['epoch_s'], threads['epoch_s'], noise)} "
                   f"it with {label} fixed (speedup "
                   f"{arm['samples_per_s'] / threads['samples_per_s']:.2f} in throughput)"
                   for label, arm in (("the per-worker batch", wide), ("the global batch", fixed))
                   if arm is not None]
        sentences.append(
            f"Against the best single process (1 worker with {threads['threads_per_worker']} "
            f"threads, {seconds_text(threads['epoch_s'])} s per epoch, "
            f"{seeds_text(threads['seeds'])}), {k} "
            f"one-thread workers were {', and '.join(against)}.")
    return [*paragraphs, " ".join(sentences),
            "`speedup.png` plots each setup's median speedup over the lrs, the band their range."]


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


def _best_lr_moved(table: pd.DataFrame, summary: pd.DataFrame, ties: dict) -> list[str]:
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


def _best_lr_ties(table: pd.DataFrame, lr_columns: list[str], summary: pd.DataFrame,
                  noise: Noise) -> tuple[dict, list[str], int]:
    """Per worker count, the lrs not told apart from the best: as the linear rule's
    pairs are, by Welch's t on the seeds where both lrs have two or more (apart at
    p < SIGNIFICANCE), else by the sweep's accuracy noise. Returns the ties (a
    clause per worker count, by worker count), the lrs told apart (a clause each)
    and the most seeds behind any of the tied means."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])
    ties, apart, most_seeds = {}, [], 1
    for _, row in table.iterrows():
        best = f"lr {row['best_lr']:g}"
        if _none_learned_at(means, _Cell(row["num_workers"], row["global_batch_size"],
                                         row["best_lr"])):
            continue  # every lr failed here: nothing to tell apart
        here = {column: _Cell(row["num_workers"], row["global_batch_size"], float(column[3:]))
                for column in lr_columns if not np.isnan(row[column])}
        seeds = {column: _per_seed(trials, key) for column, key in here.items()}
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
            test = welch(seeds[best], seeds[column])
            if test is not None:
                figures = test.text((len(seeds[best]), len(seeds[column])))
                if test.p < SIGNIFICANCE:
                    apart.append(f"{at} ({row[column]:.3f}; {figures})")
                else:
                    close.append(f"{column} ({row[column]:.3f}; {figures})")
                    tied.append(column)
            else:
                within = row[best] - row[column] <= noise.acc
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
    return ties, apart, most_seeds


def _none_learned_at(means: pd.DataFrame, key: "_Cell") -> bool:
    """Whether no seed of the cell `key` learned (`cells`' rows in `means`)."""
    rows = means[(means["num_workers"] == key.num_workers)
                 & (means["global_batch_size"] == key.global_batch_size)
                 & np.isclose(means["lr"], key.lr)]
    return not rows.empty and _none_learned(rows.iloc[0])


class _Cell(NamedTuple):
    """A batch-lr cell as `_per_seed` selects its trials."""

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


def linear_rule(summary: pd.DataFrame, noise: Noise) -> pd.DataFrame:
    """The linear scaling rule tested (Goyal et al., 2017): k times the batch at k
    times the lr should reach 1 worker's accuracy in as many epochs. One row per
    1-worker lr whose k-fold was also searched at k workers, with the verdict; each
    accuracy the mean over its seeds."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])
    if means.empty:
        return pd.DataFrame()
    single = means[means["num_workers"] == 1]
    rows = []
    for one in single.sort_values("lr").itertuples():
        for many in means[means["num_workers"] > 1].sort_values("num_workers").itertuples():
            if not np.isclose(many.lr, many.num_workers * one.lr):
                continue
            gap = many.final_test_acc - one.final_test_acc
            held = _rule_verdict(gap, None, noise, one._asdict(), many._asdict())
            # A failure to learn is the verdict; a t test on chance accuracies says nothing.
            test = (None if held in _DECIDED_BY_FAILURE else
                    welch(*(_per_seed(trials, cell_row) for cell_row in (many, one))))
            rows.append({"num_workers": many.num_workers,
                         "global_batch_size": many.global_batch_size,
                         "lr_1_worker": one.lr, "acc_1_worker": one.final_test_acc,
                         "seeds_1_worker": one.seeds, "scaled_lr": many.lr,
                         "acc_scaled": many.final_test_acc, "seeds_scaled": many.seeds,
                         "welch_t": test.t if test else np.nan,
                         "p": test.p if test else np.nan,
                         "held": (held if held in _DECIDED_BY_FAILURE
                                  else _rule_verdict(gap, test, noise)),
                         # Named in the sentences, not the table's columns.
                         "not_learned_1_worker": one.not_learned,
                         "not_learned_scaled": many.not_learned})
    return pd.DataFrame(rows)


# linear_rule's columns that the sentences read and the table leaves out.
_RULE_TEXT_ONLY = ["not_learned_1_worker", "not_learned_scaled"]


VERDICTS = {"yes": "held", "no": "did not hold",
            "within noise": "was not refuted (lower, but not beyond the noise)",
            "failed": "did not hold (no seed there learned, where 1 worker's did)",
            "some failed": "did not hold in every seed (some there did not learn, where 1 "
                           "worker's all did)",
            "inconclusive": "was not tested (1 worker did not learn at that lr: no accuracy "
                            "to hold the rule to)"}


def _verdict_text(held: str, decided_by_test: bool) -> str:
    """VERDICTS[held]; a lower accuracy that Welch's test did not call is "not
    significantly" lower, which may still be beyond the single-trial noise."""
    if held == "within noise" and decided_by_test:
        return f"was not refuted (lower, but not significantly at p < {SIGNIFICANCE:g})"
    return VERDICTS[held]


def _rule_verdict(gap: float, test, noise: Noise, one: pd.Series | None = None,
                  many: pd.Series | None = None) -> str:
    """Did k times the batch at k times the lr reach 1 worker's accuracy? Where no
    seed of 1 worker's cell (`one`) learned, there is nothing to reach: "inconclusive";
    where none of the k workers' (`many`) did, and 1 worker's did, "failed". Else,
    with replicas on both sides, Welch's test decides ("no": lower at p <
    SIGNIFICANCE; "within noise": lower, not significantly); with one seed on a side,
    the sweep's accuracy noise does ("no": lower by more than it)."""
    if one is not None and _none_learned(one):
        return "inconclusive"
    if many is not None and _none_learned(many):
        return "failed"
    if (many is not None and int(many["not_learned"])
            and (one is None or not int(one["not_learned"]))):
        return "some failed"  # a seed that diverged is the rule failing there, not a spread
    if gap >= 0:
        return "yes"
    if test is not None:
        return "no" if test.p < SIGNIFICANCE else "within noise"
    return "no" if gap < -noise.acc else "within noise"


def _none_learned(cell_row) -> bool:
    """Whether no seed of a cell learned (`cells.cell`'s `not_learned` of its `seeds`)."""
    return int(cell_row["not_learned"]) >= int(cell_row["seeds"])


def _per_seed(trials: pd.DataFrame, row) -> list[float]:
    """The final test accuracies of a cell's seeds (trials of one seed averaged)."""
    same = trials[(trials["num_workers"] == row.num_workers)
                  & (trials["global_batch_size"] == row.global_batch_size)
                  & np.isclose(trials["lr"], row.lr)]
    return list(same.groupby("seed")["final_test_acc"].mean())


# How each verdict reads in a summary of the pairs, in this order.
_OUTCOMES = {"yes": "held", "within noise": "was not refuted", "no": "did not hold",
             "some failed": "did not hold in every seed",
             "failed": "did not hold (no seed learned)", "inconclusive": "was not tested"}
# The verdicts no t test can change: a failure to learn decides them.
_DECIDED_BY_FAILURE = ("failed", "some failed", "inconclusive")


def rule_outcome(rule: pd.DataFrame) -> str:
    """What 13.5.2 found of the linear scaling rule, pair by pair, for another answer
    to cite: "at global batch 512 it was not refuted at lr 0.2, 0.4 and did not hold
    at lr 0.8 (each the k workers' lr)"."""
    if rule.empty:
        return ("13.5.2 did not test the linear scaling rule (no lr searched at k workers "
                "was k times one searched at 1)")
    parts = []
    for batch, rows in rule.groupby("global_batch_size", sort=True):
        found = [f"{_OUTCOMES[held]} at lr {', '.join(f'{lr:g}' for lr in group['scaled_lr'])}"
                 for held in _OUTCOMES for group in [rows[rows["held"] == held]]
                 if not group.empty]
        parts.append(f"at global batch {batch} it {' and '.join(found)}")
    return (f"13.5.2 tested the linear scaling rule in {counted(len(rule), 'pair')}, each at the k "
            f"workers' lr: {'; '.join(parts)}")


def answer_13_5_2(summary: pd.DataFrame, rule: pd.DataFrame, noise: Noise) -> list[str]:
    table = lr_table(summary)
    if table.empty:
        return [missing_part("batch-lr")]
    paragraphs = [markdown_table(table)]
    if len(table) < 2:
        return [*paragraphs, one_worker_count(table)]
    lr_columns = [column for column in table.columns if str(column).startswith("lr ")]
    searched = f"{lr_columns[0][3:]} to {lr_columns[-1][3:]}"
    bests = "; ".join(f"{counted(row.num_workers, 'worker')}, global batch "
                      f"{row.global_batch_size}: "
                      f"{row.best_lr:g}" for row in table.itertuples())
    sentences = [f"The best lr per worker count (the highest final test accuracy, each the "
                 f"mean over its seeds: {table['seeds'].iloc[0]} per lr at 1 worker, "
                 f"{table['seeds'].iloc[-1]} at {table['num_workers'].iloc[-1]}), each "
                 f"worker's batch {table['global_batch_size'].iloc[0]}: {bests}."]
    ties, apart, most_seeds = _best_lr_ties(table, lr_columns, summary, noise)
    sentences += _best_lr_moved(table, summary, ties)
    if apart:
        sentences.append(f"Told apart from the best: {'; '.join(apart)}.")
    if ties:
        sentences.append(f"Not resolved: {'; '.join(ties.values())}; more seeds than the "
                         f"{most_seeds} these means have at most (`--repeats "
                         f"{max(most_seeds + 2, 3)}`) would tell them apart, if anything does.")
    def owner(count) -> str:
        """"1 worker's", "2 workers'"."""
        text = counted(count, "worker")
        return text + ("'" if text.endswith("s") else "'s")

    edges = [f"{owner(row.num_workers)} ({row.on_edge} of {searched})"
             for row in table.itertuples() if row.on_edge in ("lowest", "highest")]
    if edges:
        sentences.append(f"A best on the edge of the range searched is only a bound: the best "
                         f"may lie beyond it, so widen the range (`--lr`) for "
                         f"{', '.join(edges)}.")
    if rule.empty:
        sentences.append("No lr was searched at k workers that is k times one searched at 1 "
                         f"worker, so the linear scaling rule is untested: `{EXERCISES_COMMAND}` "
                         f"searches 0.1 to 0.8.")
        return [*paragraphs, " ".join(sentences), *_warmup(summary, noise)]
    # The table's verdicts in the sentences' words (its codes are linear_rule's).
    paragraphs.append(markdown_table(rule.drop(columns=_RULE_TEXT_ONLY, errors="ignore").assign(
        held=rule["held"].map(lambda held: _OUTCOMES[held].removeprefix("was ")))))
    pairs = "; ".join(
        f"lr {row.lr_1_worker:g} on 1 worker reached {row.acc_1_worker:.3f} "
        f"({learned_seeds_text(row.seeds_1_worker, row.not_learned_1_worker)}), "
        f"lr {row.scaled_lr:g} on {row.num_workers} workers "
        f"(global batch {row.global_batch_size}) {row.acc_scaled:.3f} "
        f"({learned_seeds_text(row.seeds_scaled, row.not_learned_scaled)}), "
        f"{_rule_pair_versus(row, noise)} it: the rule "
        f"{_verdict_text(row.held, not np.isnan(row.p))}"
        for row in rule.itertuples())
    sentences.append(f"The linear scaling rule (k times the batch at k times the lr, the same "
                     f"epochs) was tested in {counted(len(rule), 'pair')}, a lower accuracy "
                     f"called only "
                     f"at p < {SIGNIFICANCE:g} by Welch's t test on the seeds where both have "
                     f"two or more, else only beyond the sweep's accuracy noise: {pairs}.")
    epochs = int(lr_trials(summary)["num_epochs"].max())
    verdicts = set(rule["held"])
    if verdicts & {"no", "failed", "some failed"}:
        sentences.append(
            f"Where the rule did not hold: a k-fold batch makes 1/k of the updates in "
            f"{epochs} epochs, and the larger lr is meant to make up for them, which Goyal et "
            f"al. (2017) found to need a warm-up of the lr at large batches (below); how "
            f"accuracy scales with the number of workers depends on re-tuning the lr (and "
            f"the epochs) for each global batch.")
    elif verdicts <= {"inconclusive"}:
        sentences.append("No pair could test the rule: 1 worker learned at none of its lrs.")
    else:
        sentences.append("No pair tested refuted the rule in this sweep.")
    return [*paragraphs, " ".join(sentences), *_warmup(summary, noise),
            "`test_acc_vs_lr.png` plots test accuracy against the lr."]


def _rule_pair_versus(row, noise: Noise) -> str:
    """`compare_acc` of a linear_rule row's k workers with its 1 worker, by the row's
    Welch test where it has one."""
    test = None if np.isnan(row.p) else Welch(row.welch_t, math.nan, row.p)
    return compare_acc(row.acc_scaled, row.acc_1_worker, noise, test,
                       (int(row.seeds_scaled), int(row.seeds_1_worker)))


def _warmup(summary: pd.DataFrame, noise: Noise) -> list[str]:
    """Each warm-up arm (one per lr, at the largest global batch) against the same lr
    and batch without warm-up, and against 1 worker at 1/k of the lr: whether warm-up
    rescued the linear scaling rule there."""
    arm = part_trials(summary, "warmup").dropna(subset=["final_test_acc"])
    if arm.empty:
        return [f"No warm-up arm ran: `{EXERCISES_COMMAND}` runs one (a warm-up epoch at the "
                f"largest global batch with the linearly scaled lr)."]
    arm = arm[arm["global_batch_size"] == arm["global_batch_size"].max()]
    return [" ".join(_warmup_sentence(summary, arm[np.isclose(arm["lr"], lr)], noise)
                     for lr in sorted(arm["lr"].unique()))]


def _warmup_sentence(summary: pd.DataFrame, arm: pd.DataFrame, noise: Noise) -> str:
    """The warm-up arm's trials (one lr, its seeds) against the same lr and batch
    without warm-up, and against 1 worker at 1/k of the lr, decided as the linear
    rule's pairs are (`_rule_verdict`: Welch's test where both sides have replicas,
    else the accuracy noise)."""
    warm = cell(arm)
    k, batch, lr = int(warm["num_workers"]), warm["global_batch_size"], warm["lr"]
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    cold = cell(trials[(trials["num_workers"] == k) & (trials["global_batch_size"] == batch)
                       & np.isclose(trials["lr"], lr)])
    one = cell(trials[(trials["num_workers"] == 1) & np.isclose(trials["lr"], lr / k)])
    start = warm.get("warmup_start_lr", 0.0)
    start = 0.0 if pd.isna(start) else float(start)
    ramp = (f"from {start:g} (1 worker's lr, as Goyal et al., 2017, start from the small "
            f"batch's) to {lr:g}" if math.isclose(start, lr / k)
            else f"from {start:g} to {lr:g}" if start > 0
            else f"from zero to {lr:g} (Goyal et al., 2017, start from the small batch's lr, "
                 f"{lr / k:g}: a ramp from zero spends the epoch at half the lr on average)")
    sentence = (f"With a {warm['warmup_epochs']}-epoch linear warm-up of the lr {ramp} at "
                f"global batch {batch} on {k} workers, the final test "
                f"accuracy was {warm['final_test_acc']:.3f} ({acc_seeds_text(warm)})")
    if cold is not None:
        sentence += (f", {compare_cells(warm, cold, noise)} "
                     f"{cold['final_test_acc']:.3f} without warm-up ({acc_seeds_text(cold)})")
    if one is None:
        return sentence + f"; no 1-worker trial at lr {lr / k:g} to hold it against."
    held = _rule_verdict(warm["final_test_acc"] - one["final_test_acc"], None, noise, one, warm)
    test = (None if held in _DECIDED_BY_FAILURE
            else welch(_per_seed(arm, warm), _per_seed(trials, one)))
    if test is not None:
        held = _rule_verdict(warm["final_test_acc"] - one["final_test_acc"], test, noise)
    versus = compare_acc(warm["final_test_acc"], one["final_test_acc"], noise, test,
                         (int(warm["seeds"]), int(one["seeds"])))
    return sentence + (
        f", and {versus} 1 worker's {one['final_test_acc']:.3f} at lr {lr / k:g} "
        f"({acc_seeds_text(one)}): with warm-up the linear scaling rule "
        f"{_verdict_text(held, test is not None)} at global batch {batch} from 1 worker's lr "
        f"{lr / k:g}.")


# Worker counts the bytes table of 13.5.3 shows, beside the sweep's own.
BYTES_WORKERS = (2, 4, 8, 16)
ROOT_VS_RING_COMMAND = "python bench/root_vs_ring.py --workers 2,3,4 --rate 50mbit"
WHY_SPLIT = (
    "Why aggregating different parameters on different workers is more efficient: in the "
    "book's allreduce one worker receives, sums and sends back every gradient, so its link "
    "carries k-1 copies each way, one way after the other, growing with k while the other "
    "links idle. When each of the k workers sums a different 1/k of the parameters "
    "(reduce-scatter) and then sends its sums to the others (all-gather), every link carries "
    "2(k-1)/k copies each way at once: under 2 at any k, the least any allreduce can move "
    "(Patarasuk and Yuan, 2009; Thakur et al., 2005). That is what a ring allreduce does "
    "inside, so gloo's allreduce (ddp, and scratch and bucketed across nodes) and the node's "
    "shared memory (scratch and bucketed on one node) already aggregate this way; what tells "
    "them apart is how many calls a step makes (scratch one per tensor, bucketed and ddp a few "
    "buffers, ddp overlapped with backward). Sharded's keeping only its 1/k of the update and "
    "optimizer state (ZeRO-1, Rajbhandari et al., 2020) saves memory and 1/k of the update's "
    "arithmetic, not bytes: its reduce-scatter and all-gather move what a ring allreduce "
    "moves; with the book's plain SGD (momentum 0) there is no optimizer state to shard, so "
    "here it saves only the update's arithmetic. Sharded's memory is measured in "
    "docs/BENCHMARKS.md.")


def bytes_moved(gradient_bytes: int, workers) -> pd.DataFrame:
    """Per step, what each worker's link carries each way under the book's
    allreduce (root) and under a reduce-scatter + all-gather (ring), in MB; and
    root's time over the ring's on a link-bound network (root's receives and
    sends follow each other, a ring's overlap)."""
    n = gradient_bytes / 1e6
    return pd.DataFrame([{"k": k, "root: worker 0, MB each way": (k - 1) * n,
                          "root: other workers, MB each way": n,
                          "ring: every worker, MB each way": 2 * (k - 1) / k * n,
                          "root / ring, seconds on a link": k}
                         for k in sorted(set(workers))])


def _wire(transport: str) -> str:
    """The transport a strategy's bytes travel: the book's root funnel goes over its
    backend's sends and receives ("gloo root"), the same wire as that backend's ring."""
    return transport.removesuffix(f" {ROOT_FUNNEL}")


def answer_13_5_3(summary: pd.DataFrame, noise: Noise,
                  gradient_bytes: int | None = None) -> list[str]:
    """`gradient_bytes`: one step's gradients of the sweep's model (the calibration's)."""
    # With the delayed arm's bucketed twin, which sums over the process group.
    overlap = part_trials(summary, "delayed")
    strategies = timed(pd.concat([part_trials(summary, "strategies"),
                                  overlap[overlap["sync"] != "delayed"]]))
    if strategies.empty:
        return [missing_part("strategies")]
    # Scratch's own trials are 13.5's experiment.
    trials = pd.concat([timed(part_trials(summary, "batch-global")), strategies])
    table = with_speedups(cells(trials, ["num_workers", "sync", "transport"]), ["sync"])
    paragraphs = [markdown_table(table[["sync", "transport", "num_workers", "epoch_s",
                                        "sync_share", "speedup", "seeds"]])]
    k = int(strategies["num_workers"].max())
    if gradient_bytes:
        paragraphs += [
            f"Bytes per step for n = {gradient_bytes / 1e6:.2f} MB of gradients "
            f"({strategies['model'].iloc[0]}, {strategies['precision'].iloc[0]}): the book's "
            f"allreduce (`--sync root`) moves (k-1)n each way through worker 0 and n through "
            f"every other worker, 2(k-1)n/R seconds on a link of R bytes/s; a reduce-scatter "
            f"and all-gather moves 2(k-1)/k n each way through every worker at once, "
            f"2(k-1)n/(kR). At k = 2 both move n each way: in bytes root loses only by not "
            f"overlapping its receive and its send (its calls, one per tensor as scratch "
            f"makes them, add latency on top); from k = 3 worker 0 carries k-1 copies "
            f"against the ring's under 2.",
            markdown_table(bytes_moved(gradient_bytes, [*BYTES_WORKERS, k])),
            f"These times are measured at k = 2, 3 and 4 on nodes joined by a capped link, "
            f"where bytes set the time: `{ROOT_VS_RING_COMMAND}` (docs/BENCHMARKS.md, "
            f"root_vs_ring: each rank's bytes written to its sockets and seconds per step "
            f"beside these predictions)."]
    if strategies["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(strategies), WHY_SPLIT]
    at_k = table[table["num_workers"] == k].assign(wire=lambda rows: rows["transport"].map(_wire))
    sentences = []
    # Ranked within a wire only: across wires the ranking measures the wire.
    for wire, ranked in at_k.groupby("wire", sort=True):
        ranked = ranked.sort_values("epoch_s")
        fastest = ranked.iloc[0]
        others = ", ".join(
            f"{compare_times(fastest['epoch_s'], row['epoch_s'], noise)} "
            f"{row['sync']} ({seconds_text(row['epoch_s'])} s, {seeds_text(row['seeds'])})"
            for _, row in ranked.iloc[1:].iterrows())
        others = f"; it was {others}" if others else ""
        sentences.append(
            f"At {k} workers through {wire or 'an unrecorded transport'}, the shortest "
            f"epoch was {fastest['sync']}'s: {seconds_text(fastest['epoch_s'])} s "
            f"({seeds_text(fastest['seeds'])}), {percent(fastest['sync_share'])} of it in "
            f"gradient sync, speedup {fastest['speedup']:.2f}{others}.")
    if at_k["wire"].nunique() > 1:
        by_wire = "; ".join(f"{', '.join(rows['sync'])} through {wire}"
                            for wire, rows in at_k.groupby("wire", sort=True))
        sentences.append(f"Strategies of different transports are not ranked against each "
                         f"other ({by_wire}): their difference is mostly the transport.")
    return [*paragraphs, " ".join(sentences), WHY_SPLIT]


def answer_13_5_4(summary: pd.DataFrame, noise: Noise) -> list[str]:
    trials = timed(part_trials(summary, "batch-global")).dropna(subset=["eval_s"])
    if trials.empty:
        return [missing_part("batch-global")]
    table = cells(trials, ["num_workers"])
    one = at_workers(trials, 1)
    columns = ["num_workers", "eval_s", "final_test_acc", "seeds"]
    if one is not None:
        table["eval_speedup"] = one["eval_s"] / table["eval_s"]
        columns.insert(2, "eval_speedup")
    paragraphs = [markdown_table(table[columns])]
    if one is None or trials["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(trials)]
    k = int(trials["num_workers"].max())
    many = at_workers(trials, k)
    sentences = [
        f"Evaluating the test set took {seconds_text(one['eval_s'], 2)} s on 1 worker "
        f"({seeds_text(one['seeds'])}) and {seconds_text(many['eval_s'], 2)} s on {k} workers "
        f"({seeds_text(many['seeds'])}): {k} workers were "
        f"{compare_times(many['eval_s'], one['eval_s'], noise)} 1 "
        f"(speedup {one['eval_s'] / many['eval_s']:.2f})." + _eval_against_threads(
            summary, many, k, noise),
        f"Each worker scores its shard of the test set and the counts of correct answers are "
        f"summed, so the accuracy is the single-worker one by construction "
        f"(tests/processes/test_equivalence.py checks it); the final test accuracy on {k} "
        f"workers, {many['final_test_acc']:.3f}, was "
        f"{compare_cells(many, one, noise)} 1 worker's "
        f"{one['final_test_acc']:.3f}, any gap coming from training, not from evaluation."]
    return [*paragraphs, " ".join(sentences)]


def _eval_against_threads(summary: pd.DataFrame, many: pd.Series, k: int, noise: Noise) -> str:
    """On CPU workers, k workers' evaluation against the best single process (one
    worker using the node's cores as threads, 13.5.1's baseline): most of the
    gain over 1 one-thread worker may be the other cores', which threads use too."""
    threads = cell(timed(part_trials(summary, "threads")).dropna(subset=["eval_s"]))
    if threads is None:
        return ""
    return (f" Against the best single process (1 worker with "
            f"{int(threads['threads_per_worker'])} threads, "
            f"{seconds_text(threads['eval_s'], 2)} s, {seeds_text(threads['seeds'])}), {k} "
            f"one-thread workers were {compare_times(many['eval_s'], threads['eval_s'], noise)} "
            f"it (speedup {threads['eval_s'] / many['eval_s']:.2f}): on CPU workers much of the "
            f"gain over 1 one-thread worker is the other cores', which one process's threads "
            f"use too.")
