"""13.5.4, test accuracy on several workers, answered from a sweep's trials: the
evaluation's time on k workers against 1 and against the best single process,
and its accuracy, the single worker's by construction."""

import pandas as pd

from orchestrator.records import seconds_text
from orchestrator.report.answers.cells import (at_workers, cell, cells, part_trials, shares_gpu,
                                               speedup_text, timed)
from orchestrator.report.answers.compare import compare_cells, compare_times
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.sides import of_means, sides_of
from orchestrator.report.answers.wording import in_short, missing_part, one_worker_count, seeds_text
from orchestrator.report.summary import shared_gpu_mask
from orchestrator.report.tables import markdown_table


def answer_13_5_4(summary: pd.DataFrame, noise: Noise) -> list[str]:
    trials = timed(part_trials(summary, "batch-global")).dropna(subset=["eval_s"])
    if trials.empty:
        return [missing_part("batch-global")]
    table = cells(trials, ["num_workers"])
    one = at_workers(trials, 1)
    columns = ["num_workers", "eval_s", "final_test_acc", "seeds"]
    if one is not None:
        # Workers that shared a GPU took turns on it: no speedup read.
        table["eval_speedup"] = (one["eval_s"] / table["eval_s"]).where(
            ~shared_gpu_mask(table))
        columns.insert(2, "eval_speedup")
    paragraphs = [markdown_table(table[columns])]
    if one is None or trials["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(trials)]
    k = int(trials["num_workers"].max())
    many = at_workers(trials, k)
    versus = compare_times(many["eval_s"], one["eval_s"], noise, sides_of(many, one, "eval_s"),
                           noise.eval_spread)
    if shares_gpu(many):  # workers taking turns on one GPU: no time against 1 worker's
        versus = "not compared with"
    sentences = [
        f"Evaluating the test set took {seconds_text(one['eval_s'], 2)} s on 1 worker "
        f"({seeds_text(one['seeds'])}) and {seconds_text(many['eval_s'], 2)} s on {k} workers "
        f"({seeds_text(many['seeds'])}): {k} workers were "
        f"{versus} 1 "
        f"({speedup_text(many, one['eval_s'] / many['eval_s'])})." + _eval_against_threads(
            summary, many, k, noise),
        f"Each worker scores its shard of the test set and the counts of correct answers are "
        f"summed, so the accuracy is the single-worker one by construction "
        f"(tests/processes/test_equivalence.py checks it); the final test accuracy on {k} "
        f"workers, {many['final_test_acc']:.3f}, was "
        f"{compare_cells(many, one, noise)} 1 worker's "
        f"{one['final_test_acc']:.3f}, any gap coming from training, not from evaluation."]
    short = (f"Each worker scores its own shard of the test set and the counts of correct "
             f"answers are summed across the workers (one allreduce), so the accuracy is one "
             f"device's by construction. Here {k} workers scored the test set in "
             f"{seconds_text(many['eval_s'], 2)} s against 1 worker's "
             f"{seconds_text(one['eval_s'], 2)} s"
             + (", sharing one GPU: no speedup read." if shares_gpu(many) else "."))
    return [in_short(short), *paragraphs, " ".join(sentences)]


def _eval_against_threads(summary: pd.DataFrame, many: pd.Series, k: int, noise: Noise) -> str:
    """On CPU workers, k workers' evaluation against the best single process (one
    worker using the node's cores as threads, 13.5.1's baseline): most of the
    gain over 1 one-thread worker may be the other cores', which threads use too."""
    threads = cell(timed(part_trials(summary, "threads")).dropna(subset=["eval_s"]))
    if threads is None:
        return ""
    versus = compare_times(many["eval_s"], threads["eval_s"], noise,
                           sides_of(many, threads, "eval_s"),
                           noise.eval_spread)
    return (f" Against the best single process (1 worker with "
            f"{int(threads['threads_per_worker'])} threads, "
            f"{seconds_text(threads['eval_s'], 2)} s, {seeds_text(threads['seeds'])}), {k} "
            f"one-thread workers were "
            f"{versus} "
            f"it (speedup {threads['eval_s'] / many['eval_s']:.2f}"
            f"{of_means(sides_of(many, threads, 'eval_s'))}): on CPU workers much of the "
            f"gain over 1 one-thread worker is the other cores', which one process's threads "
            f"use too.")
