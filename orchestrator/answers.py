"""The "## Answers" section of a sweep's report: the book's seven exercises of
13.5 and 13.6, each answered from the sweep's own trials.

Every number in a sentence is read from the frames; a difference smaller than
the noise between two identical trials is reported as within noise. Where the
sweep lacks what a question needs, the answer says so and names the command
that would provide it. 13.6's answers are in answers_13_6.py.
"""

import numpy as np
import pandas as pd

from orchestrator import answers_13_6
from orchestrator.answers_base import (EXERCISES_COMMAND, Noise, at_workers, compare_acc, compare_times,
                                       estimate_noise, missing_part, one_worker_count,
                                       part_trials, percent, timed)
from orchestrator.results import markdown_table

EXERCISES = [
    ("13.5.1", "A minibatch of k*b on k workers",
     "When training on multiple GPUs, change the minibatch size from $b$ to $k \\cdot b$, "
     "i.e., scale it up by the number of GPUs."),
    ("13.5.2", "Learning rate and the number of workers",
     "Compare accuracy for different learning rates. How does it scale with the number of "
     "GPUs."),
    ("13.5.3", "A more efficient allreduce",
     "Implement a more efficient allreduce that aggregates different parameters on different "
     "GPUs (why is this more efficient in the first place)."),
    ("13.5.4", "Test accuracy on several workers",
     "Implement multi-GPU test accuracy computation."),
    ("13.6.1", "ResNet-18, and 16 workers",
     "This section uses ResNet-18. Try different epochs, batch sizes, and learning rates. Use "
     "more GPUs for computation. What happens if you try this with 16 GPUs (e.g., on an AWS "
     "p2.16xlarge instance)?"),
    ("13.6.2", "Devices of different speed",
     "Sometimes, different devices provide different computing power. We could use the GPUs "
     "and the CPU at the same time. How should we divide the work? Is it worth the effort? "
     "Why? Why not?"),
    ("13.6.3", "Overlapping steps",
     "What happens if we drop `npx.waitall()`? How would you modify training such that you "
     "have an overlap of up to two steps for parallelism?"),
]


def render_answers(summary: pd.DataFrame, epochs: pd.DataFrame, scaling, *,
                   data_note: str, use_gpu: bool, num_test_examples: int | None = None) -> str:
    """The section in markdown. `scaling` is None or has the scaling model's
    `validation`, `predictions`, `links` and `contention`; `num_test_examples`
    sets the accuracy noise's floor."""
    noise = estimate_noise(summary, num_test_examples)
    rule = linear_rule(summary, noise)
    answers = [answer_13_5_1(summary, noise), answer_13_5_2(rule, noise),
               answer_13_5_3(summary, noise), answer_13_5_4(summary, noise),
               answers_13_6.answer_13_6_1(summary, scaling, use_gpu, held_up_to(rule)),
               answers_13_6.answer_13_6_2(summary, epochs, noise),
               answers_13_6.answer_13_6_3(summary, noise)]
    lines = ["## Answers", ""]
    if data_note:
        lines += [f"Accuracies come from data subsets ({data_note}) and are lower than the "
                  f"book's.", ""]
    lines += [noise.sentence(), ""]
    for (number, title, question), paragraphs in zip(EXERCISES, answers):
        lines += [f"### {number} {title}", "", f"> {question}", ""]
        for paragraph in paragraphs:
            lines += [paragraph, ""]
    return "\n".join(lines)


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
    if not threads.empty and wide is not None:
        best = threads.iloc[0]
        sentences.append(
            f"Against the best single process (1 worker with {best['threads_per_worker']} "
            f"threads, {best['mean_epoch_time_s']:.1f} s per epoch), {k} one-thread workers "
            f"with the per-worker batch fixed were "
            f"{compare_times(wide['mean_epoch_time_s'], best['mean_epoch_time_s'], noise)} it "
            f"(speedup {wide['samples_per_s'] / best['samples_per_s']:.2f} in throughput).")
    return [*paragraphs, " ".join(sentences), "`speedup.png` plots every speedup."]


def linear_rule(summary: pd.DataFrame, noise: Noise) -> pd.DataFrame:
    """Per worker count of part batch-lr: each lr's final test accuracy, the best
    lr, the linear scaling rule's lr (k times 1 worker's best) and the verdict."""
    trials = part_trials(summary, "batch-lr").dropna(subset=["final_test_acc"])
    if trials.empty:
        return pd.DataFrame()
    table = trials.pivot_table(index=["num_workers", "global_batch_size"], columns="lr",
                               values="final_test_acc").reset_index()
    lrs = [column for column in table.columns if isinstance(column, float)]
    accs = table[lrs].to_numpy()
    table["best_lr"] = [lrs[index] for index in np.nanargmax(accs, axis=1)]
    table["best_acc"] = np.nanmax(accs, axis=1)
    first = table.iloc[0]
    table["rule_lr"] = table["num_workers"] / first["num_workers"] * first["best_lr"]
    table["rule_acc"] = [_acc_at(row, lrs, lr) for row, lr in zip(accs, table["rule_lr"])]
    table["rule"] = [_verdict(row, noise) for row in table.itertuples()]
    return table.rename(columns={lr: f"lr {lr:g}" for lr in lrs})


def held_up_to(rule: pd.DataFrame) -> int | None:
    """The largest global batch up to which the linear scaling rule held at every
    worker count; None where it was not tested or failed beyond 1 worker."""
    held = None
    for row in rule.iloc[1:].itertuples():
        if row.rule not in ("yes", "within noise"):
            break
        held = row.global_batch_size
    return held


def answer_13_5_2(rule: pd.DataFrame, noise: Noise) -> list[str]:
    if rule.empty:
        return [missing_part("batch-lr")]
    paragraphs = [markdown_table(rule.drop(columns=["best_acc", "rule_acc"]))]
    if len(rule) < 2:
        return [*paragraphs, one_worker_count(rule)]
    first = rule.iloc[0]
    per = "k" if first["num_workers"] == 1 else f"k/{first['num_workers']}"
    workers = f"{first['num_workers']} worker" + ("s" if first["num_workers"] > 1 else "")
    sentences = [f"At {workers} (global batch "
                 f"{first['global_batch_size']}) the best lr was {first['best_lr']:g} (test "
                 f"accuracy {first['best_acc']:.3f}); the linear scaling rule predicts "
                 f"{per} x {first['best_lr']:g} at k workers."]
    clauses = [f"at {row.num_workers} workers (global batch {row.global_batch_size}) the best "
               f"was {row.best_lr:g} ({row.best_acc:.3f}){_rule_clause(row, noise)}"
               for row in rule.iloc[1:].itertuples()]
    sentences.append(clauses[0][0].upper() + "; ".join(clauses)[1:] + ".")
    largest = held_up_to(rule)
    sentences.append(f"The rule held up to global batch {largest} in this sweep." if largest
                     else "The rule held at no worker count beyond 1 in this sweep.")
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
        f"(tests/test_equivalence.py checks it); the final test accuracy on {k} workers, "
        f"{many['final_test_acc']:.3f}, was "
        f"{compare_acc(many['final_test_acc'], one['final_test_acc'], noise)} 1 worker's "
        f"{one['final_test_acc']:.3f}, any gap coming from training, not from evaluation."]
    return [*paragraphs, " ".join(sentences)]


def _acc_at(accs: np.ndarray, lrs: list[float], lr: float) -> float:
    """The accuracy at `lr` (k times a searched lr need not be one bit for bit)."""
    matches = np.flatnonzero(np.isclose(lrs, lr))
    return accs[matches[0]] if len(matches) else np.nan


def _verdict(row, noise: Noise) -> str:
    if np.isclose(row.best_lr, row.rule_lr):
        return "yes"
    if np.isnan(row.rule_acc):
        return "not searched"
    return "within noise" if row.best_acc - row.rule_acc <= noise.acc else "no"


def _rule_clause(row, noise: Noise) -> str:
    if row.rule == "yes":
        return ", as the rule predicts"
    if row.rule == "not searched":
        return f"; the rule's {row.rule_lr:g} was not searched"
    outcome = "" if row.rule == "within noise" else ": the rule failed here"
    return (f"; the rule's {row.rule_lr:g} reached {row.rule_acc:.3f}, "
            f"{compare_acc(row.rule_acc, row.best_acc, noise)} the best{outcome}")
