"""13.5's four exercises answered from a sweep's trials: a bigger minibatch on
k workers, the learning rate against k, a more efficient allreduce, and test
accuracy on several workers. Each function returns the answer's paragraphs.
"""

import numpy as np
import pandas as pd

from orchestrator.report.answers.evidence import (EXERCISES_COMMAND, Noise, at_workers, compare_acc, compare_times,
                                                  missing_part, one_worker_count, part_trials,
                                                  percent, timed)
from orchestrator.report.tables import markdown_table


def answer_13_5_1(summary: pd.DataFrame, noise: Noise) -> list[str]:
    fixed_global = timed(part_trials(summary, "batch-global"))
    if fixed_global.empty:
        return [missing_part("batch-global")]
    base_lr = fixed_global["base_lr"].iloc[0]
    per_worker = timed(part_trials(summary, "batch-lr"))
    # 13.5's own lr, so that the two arms differ only in the batch.
    per_worker = per_worker[np.isclose(per_worker["base_lr"], base_lr)]
    threads = timed(part_trials(summary, "threads"))
    arms = pd.concat([per_worker.assign(batch=per_worker["batch_size"].map("{} per worker".format)),
                      fixed_global.assign(batch=fixed_global["batch_size"].map("{} global".format))])
    columns = ["batch", "num_workers", "global_batch_size", "steps_per_epoch",
               "mean_epoch_time_s", "speedup", "final_test_acc"]
    if not threads.empty:
        arms["speedup_vs_threads"] = arms["samples_per_s"] / threads["samples_per_s"].iloc[0]
        columns.insert(-1, "speedup_vs_threads")
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
            f"{many['mean_epoch_time_s']:.1f} s against {one['mean_epoch_time_s']:.1f} s on 1 "
            f"worker ({one['steps_per_epoch']} steps): speedup {many['speedup']:.2f}.")
    wide, fixed = at_workers(per_worker, k), at_workers(fixed_global, k)
    if wide is not None and fixed is not None:
        sentences.append(
            f"At {k} workers the per-worker batch's epochs were "
            f"{compare_times(wide['mean_epoch_time_s'], fixed['mean_epoch_time_s'], noise)} the "
            f"global batch's, and its final test accuracy after {wide['epochs_run']} epochs, "
            f"{wide['final_test_acc']:.3f}, was "
            f"{compare_acc(wide['final_test_acc'], fixed['final_test_acc'], noise)} "
            f"{fixed['final_test_acc']:.3f}: a global batch of {wide['global_batch_size']} makes "
            f"fewer, larger steps per epoch, so the same epochs make fewer updates (13.5.2 "
            f"re-tunes the lr).")
    if not threads.empty:
        best = threads.iloc[0]
        against = [f"{compare_times(arm['mean_epoch_time_s'], best['mean_epoch_time_s'], noise)} "
                   f"it with {label} fixed (speedup "
                   f"{arm['samples_per_s'] / best['samples_per_s']:.2f} in throughput)"
                   for label, arm in (("the per-worker batch", wide), ("the global batch", fixed))
                   if arm is not None]
        sentences.append(
            f"Against the best single process (1 worker with {best['threads_per_worker']} "
            f"threads, {best['mean_epoch_time_s']:.1f} s per epoch), {k} one-thread workers "
            f"were {', and '.join(against)}.")
    return [*paragraphs, " ".join(sentences),
            "`speedup.png` plots each setup's median speedup over the lrs, the band their range."]


def lr_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per worker count of part batch-lr: each lr's final test accuracy and the best lr."""
    trials = part_trials(summary, "batch-lr").dropna(subset=["final_test_acc"])
    if trials.empty:
        return pd.DataFrame()
    table = trials.pivot_table(index=["num_workers", "global_batch_size"], columns="lr",
                               values="final_test_acc").reset_index()
    lrs = [column for column in table.columns if isinstance(column, float)]
    table["best_lr"] = [lrs[index] for index in np.nanargmax(table[lrs].to_numpy(), axis=1)]
    return table.rename(columns={lr: f"lr {lr:g}" for lr in lrs})


def linear_rule(summary: pd.DataFrame, noise: Noise) -> pd.DataFrame:
    """The linear scaling rule tested (Goyal et al., 2017): k times the batch at k
    times the lr should reach 1 worker's accuracy in as many epochs. One row per
    1-worker lr whose k-fold was also searched at k workers, with the verdict."""
    trials = part_trials(summary, "batch-lr").dropna(subset=["final_test_acc"])
    single = trials[trials["num_workers"] == 1]
    rows = []
    for one in single.sort_values("lr").itertuples():
        for many in trials[trials["num_workers"] > 1].sort_values("num_workers").itertuples():
            if not np.isclose(many.lr, many.num_workers * one.lr):
                continue
            gap = many.final_test_acc - one.final_test_acc
            rows.append({"num_workers": many.num_workers,
                         "global_batch_size": many.global_batch_size,
                         "lr_1_worker": one.lr, "acc_1_worker": one.final_test_acc,
                         "scaled_lr": many.lr, "acc_scaled": many.final_test_acc,
                         "held": "yes" if gap >= -noise.acc else "no"})
    return pd.DataFrame(rows)


def held_up_to(rule: pd.DataFrame) -> int | None:
    """The largest global batch up to which the rule held for every lr tested; None
    where it was not tested or failed at the first global batch beyond 1 worker's."""
    held = None
    if rule.empty:
        return held
    for batch, rows in rule.groupby("global_batch_size", sort=True):
        if (rows["held"] != "yes").any():
            break
        held = batch
    return held


def answer_13_5_2(summary: pd.DataFrame, rule: pd.DataFrame, noise: Noise) -> list[str]:
    table = lr_table(summary)
    if table.empty:
        return [missing_part("batch-lr")]
    paragraphs = [markdown_table(table)]
    if len(table) < 2:
        return [*paragraphs, one_worker_count(table)]
    bests = "; ".join(f"{row.num_workers} worker(s), global batch {row.global_batch_size}: "
                      f"{row.best_lr:g}" for row in table.itertuples())
    sentences = [f"The best lr per worker count, each worker's batch "
                 f"{table['global_batch_size'].iloc[0]}: {bests}."]
    if rule.empty:
        sentences.append("No lr was searched at k workers that is k times one searched at 1 "
                         f"worker, so the linear scaling rule is untested: `{EXERCISES_COMMAND}` "
                         f"searches 0.1, 0.2 and 0.4.")
        return [*paragraphs, " ".join(sentences)]
    paragraphs.append(markdown_table(rule))
    pairs = "; ".join(
        f"lr {row.lr_1_worker:g} on 1 worker reached {row.acc_1_worker:.3f}, lr "
        f"{row.scaled_lr:g} on {row.num_workers} workers (global batch "
        f"{row.global_batch_size}) {row.acc_scaled:.3f}, "
        f"{compare_acc(row.acc_scaled, row.acc_1_worker, noise)} it"
        for row in rule.itertuples())
    sentences.append(f"The linear scaling rule (k times the batch at k times the lr, the same "
                     f"epochs) was tested in {len(rule)} pair(s): {pairs}.")
    largest = held_up_to(rule)
    epochs = int(part_trials(summary, "batch-lr")["num_epochs"].max())
    if largest:
        sentences.append(f"The rule held up to global batch {largest} in this sweep.")
    else:
        sentences.append(
            f"The rule did not hold in this sweep: a k-fold batch makes 1/k of the updates in "
            f"{epochs} epochs, and the larger lr is meant to make up for them, which Goyal et "
            f"al. (2017) found to need a warm-up of the lr (`--warmup-epochs`) at large "
            f"batches; how accuracy scales with the number of workers depends on re-tuning the "
            f"lr (and the epochs) for each global batch.")
    return [*paragraphs, " ".join(sentences),
            "`test_acc_vs_lr.png` plots test accuracy against the lr."]


def answer_13_5_3(summary: pd.DataFrame, noise: Noise) -> list[str]:
    strategies = timed(part_trials(summary, "strategies"))
    if strategies.empty:
        return [missing_part("strategies")]
    # Scratch's own trials are 13.5's experiment.
    trials = pd.concat([timed(part_trials(summary, "batch-global")), strategies])
    table = trials[["sync", "num_workers", "mean_epoch_time_s", "sync_share", "speedup"]]
    paragraphs = [markdown_table(table.sort_values(["num_workers", "sync"]).reset_index(drop=True))]
    if strategies["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(strategies)]
    k = int(strategies["num_workers"].max())
    ranked = trials[trials["num_workers"] == k].sort_values("mean_epoch_time_s")
    fastest = ranked.iloc[0]
    others = ", ".join(
        f"{compare_times(fastest['mean_epoch_time_s'], row['mean_epoch_time_s'], noise)} "
        f"{row['sync']} ({row['mean_epoch_time_s']:.1f} s)" for _, row in ranked.iloc[1:].iterrows())
    others = f"; it was {others}" if others else ""
    sentences = [
        f"At {k} workers the shortest epoch was {fastest['sync']}'s: "
        f"{fastest['mean_epoch_time_s']:.1f} s, {percent(fastest['sync_share'])} of it in "
        f"gradient sync, speedup {fastest['speedup']:.2f}{others}.",
        "Why aggregating different parameters on different workers is more efficient: "
        "scratch sums each gradient tensor in its own collective call, while sharded "
        "(reduce-scatter, then all-gather) has each worker sum and update only its 1/k of "
        "the parameters, so no worker receives, adds up and updates the whole model, and each "
        "holds 1/k of the optimizer state; bucketed and ddp instead pack the gradients into a "
        "few large buffers, paying each call's latency a few times per step.",
        "Sharded's memory advantage is measured in docs/BENCHMARKS.md."]
    return [*paragraphs, " ".join(sentences)]


def answer_13_5_4(summary: pd.DataFrame, noise: Noise) -> list[str]:
    trials = timed(part_trials(summary, "batch-global")).dropna(subset=["mean_eval_time_s"])
    if trials.empty:
        return [missing_part("batch-global")]
    one = at_workers(trials, 1)
    table = trials[["num_workers", "mean_eval_time_s", "final_test_acc"]].copy()
    if one is not None:
        table.insert(2, "eval_speedup", one["mean_eval_time_s"] / table["mean_eval_time_s"])
    paragraphs = [markdown_table(table.reset_index(drop=True))]
    if one is None or trials["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(trials)]
    k = int(trials["num_workers"].max())
    many = at_workers(trials, k)
    sentences = [
        f"Evaluating the test set took {one['mean_eval_time_s']:.2f} s on 1 worker and "
        f"{many['mean_eval_time_s']:.2f} s on {k} workers: {k} workers were "
        f"{compare_times(many['mean_eval_time_s'], one['mean_eval_time_s'], noise)} 1 "
        f"(speedup {one['mean_eval_time_s'] / many['mean_eval_time_s']:.2f}).",
        f"Each worker scores its shard of the test set and the counts of correct answers are "
        f"summed, so the accuracy is the single-worker one by construction "
        f"(tests/processes/test_equivalence.py checks it); the final test accuracy on {k} "
        f"workers, {many['final_test_acc']:.3f}, was "
        f"{compare_acc(many['final_test_acc'], one['final_test_acc'], noise)} 1 worker's "
        f"{one['final_test_acc']:.3f}, any gap coming from training, not from evaluation."]
    return [*paragraphs, " ".join(sentences)]
