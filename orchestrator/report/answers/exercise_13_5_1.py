"""13.5.1, a minibatch of k*b on k workers, answered from a sweep's trials: the
per-worker batch kept against the global batch kept, in time and accuracy, and
both against the best single process. The answer is a list of paragraphs;
replicas (seeds) of a configuration are averaged into one cell (cells.cell) and
every number says how many stand behind it."""

import math

import numpy as np
import pandas as pd

from orchestrator.records import counted, seconds_text
from orchestrator.report.answers.cells import (at_workers, cell, cells, none_learned,
                                               part_trials, shares_gpu, speedup_over,
                                               speedup_text, sync_seconds, timed,
                                               with_speedups)
from orchestrator.report.answers.compare import (accuracy_figures, cells_differ, cells_p,
                                                 compare_cells, compare_sync, compare_times,
                                                 ratio_text, syncs_not_told_apart, weak)
from orchestrator.report.answers.learning_rates import lr_trials
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.sides import of_means, sides_of
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, acc_seeds_text, in_short,
                                                 missing_part, one_worker_count, seeds_text)
from orchestrator.report.tables import markdown_table


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
    sentences, speedups = [], {}
    for label, trials in (("the per-worker batch", per_worker), ("the global batch", fixed_global)):
        one, many = at_workers(trials, 1), at_workers(trials, k)
        if one is None or many is None:
            sentences.append(f"There is no 1- and {k}-worker pair with {label} fixed: "
                             f"`{EXERCISES_COMMAND}` runs one.")
            continue
        sentences.append(
            f"Keeping {label} fixed (global batch {many['global_batch_size']} on {k} workers, "
            f"{counted(many['steps_per_epoch'], 'step')} per epoch), an epoch took "
            f"{seconds_text(many['epoch_s'])} s ({seeds_text(many['seeds'])}) against "
            f"{seconds_text(one['epoch_s'])} s on 1 worker ({seeds_text(one['seeds'])}, "
            f"{counted(one['steps_per_epoch'], 'step')}): "
            f"{speedup_text(many, speedup_over(many, one))}.")
        speedups[label] = speedup_over(many, one)
    wide, fixed = at_workers(per_worker, k), at_workers(fixed_global, k)
    if wide is not None and fixed is not None:
        updates = (f"in {counted(wide['epochs_run'], 'epoch')} it made "
                   f"{int(wide['epochs_run'] * wide['steps_per_epoch']):,} updates, the global "
                   f"batch's arm {int(fixed['epochs_run'] * fixed['steps_per_epoch']):,}")
        accuracy = (
            f"its final test accuracy, {wide['final_test_acc']:.3f} "
            f"({acc_seeds_text(wide)}), is a failure to train, not a gap to read: {updates}, "
            f"too few, at its lr, to leave the initial plateau"
            if none_learned(wide) else
            f"its final test accuracy after {counted(wide['epochs_run'], 'epoch')}, "
            f"{wide['final_test_acc']:.3f} ({acc_seeds_text(wide)}), was "
            f"{compare_cells(wide, fixed, noise)} "
            f"{fixed['final_test_acc']:.3f} ({acc_seeds_text(fixed)}): {updates}")
        sentences.append(
            f"At {k} workers the per-worker batch's epochs were "
            f"{compare_times(wide['epoch_s'], fixed['epoch_s'], noise, sides_of(wide, fixed))} "
            f"the global batch's, "
            f"and {accuracy}; a global batch of {wide['global_batch_size']} makes fewer, "
            f"larger steps per epoch, so the same epochs make fewer updates (13.5.2 re-tunes "
            f"the lr).")
        sentences.append(_fewer_sums(wide, fixed, noise))
    if threads is not None:
        def versus(arm) -> str:  # the threads trial's one epoch, or the arm's, sets the noise
            return compare_times(arm["epoch_s"], threads["epoch_s"], noise,
                                 sides_of(arm, threads))

        against = [f"{versus(arm)} it with {label} fixed (speedup "
                   f"{arm['samples_per_s'] / threads['samples_per_s']:.2f} in throughput"
                   f"{of_means(sides_of(arm, threads))})"
                   for label, arm in (("the per-worker batch", wide), ("the global batch", fixed))
                   if arm is not None]
        sentences.append(
            f"Against the best single process (1 worker with {threads['threads_per_worker']} "
            f"threads, {seconds_text(threads['epoch_s'])} s per epoch, "
            f"{seeds_text(threads['seeds'])}), {k} "
            f"one-thread workers were {', and '.join(against)}.")
    short = []
    if wide is not None and fixed is not None and len(speedups) == 2:
        against = ("" if threads is None else
                   f" Against the best single process ({threads['threads_per_worker']} threads "
                   f"in one, which use the same cores) its epochs were "
                   + ratio_text(wide["epoch_s"], threads["epoch_s"], noise,
                                sides_of(wide, threads)) + " that process's.")
        short = [in_short(f"{_short(wide, fixed, speedups, k, noise)}{against} 13.5.2 re-tunes "
                          f"the lr for the larger batch.")]
    plotted = ("`speedup.png` plots no speedup: its multi-worker trials shared one GPU."
               if wide is not None and shares_gpu(wide) else
               "`speedup.png` plots each setup's median speedup over the lrs, the band their "
               "range.")
    return [*short, *paragraphs, " ".join(sentences), plotted]


def _short(wide: pd.Series, fixed: pd.Series, speedups: dict, k: int, noise: Noise) -> str:
    """The answer in two sentences: the two ways' speedups, which epoch was the
    shorter, and what the fewer updates did to the accuracy."""
    faster = (f"its epochs were "
              f"{ratio_text(wide['epoch_s'], fixed['epoch_s'], noise, sides_of(wide, fixed))} "
              f"the other way's")
    epochs = counted(wide["epochs_run"], "epoch")
    sign = -1 if none_learned(wide) else cells_differ(wide, fixed, noise)
    marked = "" if none_learned(wide) else weak(cells_p(wide, fixed, noise))
    same_lr = (f" at the same lr, {wide['lr']:g}," if math.isclose(wide["lr"], fixed["lr"])
               else "")
    accuracy = (f"with 1/{k} of the updates an epoch{same_lr} it did not learn in {epochs}"
                if none_learned(wide) else
                f"with 1/{k} of the updates an epoch{same_lr} its accuracy after {epochs} was "
                + {
                    -1: "the lower", 0: "not told apart from the other's",
                    1: "the higher"}[sign]
                + f" ({accuracy_figures(wide, fixed, noise)}"
                + (f"; {marked})" if marked else ")"))
    if shares_gpu(wide) or shares_gpu(fixed):
        return (f"Scaling the minibatch with the workers ({wide['global_batch_size']} on {k}, "
                f"who shared one GPU: no speedup read), {faster}, "
                f"{'but' if sign < 0 else 'and'} {accuracy}.")
    return (f"Scaling the minibatch with the workers ({wide['global_batch_size']} on {k}) ran "
            f"an epoch {speedups['the per-worker batch']:.2f}x as fast as 1 worker, keeping "
            f"the global batch {speedups['the global batch']:.2f}x: {faster}, "
            f"{'but' if sign < 0 else 'and'} {accuracy}.")


def _fewer_sums(wide: pd.Series, fixed: pd.Series, noise: Noise) -> str:
    """The per-worker batch's saving in gradient sync: a sum's cost is the gradient's
    bytes whatever the batch, and its epoch makes fewer steps, so fewer sums; tested
    as sync times are (`compare_sync`). Empty where an arm has no sync seconds."""
    wide_sync, fixed_sync = (sync_seconds(arm) for arm in (wide, fixed))
    if not (wide_sync > 0 and fixed_sync > 0):
        return ""
    pair = sides_of(wide, fixed, "sync_s")
    steps = int(wide["steps_per_epoch"]), int(fixed["steps_per_epoch"])
    each = [1000 * sync_s / count for sync_s, count in zip((wide_sync, fixed_sync), steps)]
    sums = (f"it sums the gradients once a step, {steps[0]} times an epoch against "
            f"{steps[1]}, the same bytes each time whatever the batch ({each[0]:.2g} ms a sum "
            f"against {each[1]:.2g} ms: a sum's time also holds the wait for the slower "
            f"worker's step)")
    told = ("." if
            syncs_not_told_apart(wide_sync, fixed_sync, noise, pair) else
            ". With more workers or a slower link, where sums take more of the epoch, the "
            "per-worker batch saves more.")
    return (f"Its epoch spent {seconds_text(wide_sync, 2)} s in gradient sync "
            f"({seeds_text(wide['seeds'])}), "
            f"{compare_sync(wide_sync, fixed_sync, noise, pair)} the global batch's "
            f"{seconds_text(fixed_sync, 2)} s ({seeds_text(fixed['seeds'])}): {sums}{told}")
