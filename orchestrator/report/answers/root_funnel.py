"""13.5.3's own question, the book's allreduce (`--sync root`, every gradient through
worker 0) against a strategy that sums a different part on each worker (`sharded`):
their epochs' gap within a ranking, split into its parts where the sweep's epochs
allow it, and what the calibration's timed sums say of it; and those timings read
at a gradient's size, which the sharded sentence of exercise_13_5_3.py reads too.
"""

from typing import NamedTuple

import pandas as pd

from orchestrator.records import (FINITE_CHECK_INTERVAL_STEPS, ROOT_FUNNEL, SHARDED_PAIR,
                                  seconds_text)
from orchestrator.report.answers.cells import sync_seconds
from orchestrator.report.answers.compare import (compare_sync, compare_times, ratio_text,
                                                 syncs_not_told_apart, times_differ)
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.sides import Side, Sides, sides_of
from orchestrator.report.answers.welch import SIGNIFICANCE, p_text
from orchestrator.report.answers.wording import seeds_text
from orchestrator.report.summary import per_worker_values, steady_epochs


def sharded_calls_a_step(use_gpu: bool) -> str:
    """How many calls sharded makes a step: its reduce-scatter and all-gather, and on
    CPUs the one-element sum of its workers' non-finite counts, read every step there
    (records.FINITE_CHECK_INTERVAL_STEPS)."""
    return "two" if use_gpu else "three"


def sharded_steps_calls(use_gpu: bool) -> str:
    """The calls sharded makes a step, against an allreduce's one, named
    (`sharded_calls_a_step`)."""
    if use_gpu:
        return (f"{sharded_calls_a_step(use_gpu)} calls a step (a reduce-scatter and an "
                f"all-gather; its finite check's one-element sum every "
                f"{FINITE_CHECK_INTERVAL_STEPS['cuda']}th)")
    return (f"{sharded_calls_a_step(use_gpu)} calls a step (a reduce-scatter, an all-gather "
            f"and its finite check's one-element sum)")


def gap_interval(test, extra_s: float, gap_s: float) -> str:
    """Whether the calibration's `extra_s` explains the sync gap: the ratio of the two
    syncs it implies against the measured ratio's 95% interval (from its test; both
    sides measured, so the interval is the ratio's, not seconds over a known base),
    to end the sentence; where there is no test, whether it explains less than nine
    tenths."""
    if test is None:
        return "; these timings do not explain the rest." if extra_s < 0.9 * gap_s else "."
    implied = (test.other_s + extra_s) / test.other_s
    low, high = test.ratio_interval()
    said = (f"; they would make sharded's sync {implied:.2f}x the other's, against a measured "
            f"ratio whose 95% interval is {low:.2f} to {high:.2f}")
    if implied < low:
        return f"{said}: these timings do not explain all of it."
    return (f"{said}: this sweep cannot tell whether they explain all of it."
            if implied <= high else f"{said}.")


class RootPair(NamedTuple):
    """Sharded's and root's cells at one wire's `k` workers, as the exercise's own
    question compares them: their sides, the sign of their epochs' gap (`times_differ`,
    within the ranking's family) and, at 2 workers where that gap is told apart,
    whether their seconds in sync are too (`_syncs_apart`)."""
    mine: pd.Series
    book: pd.Series
    pair: Sides
    sign: int
    syncs_apart: bool


def root_pair(ranked: pd.DataFrame, k: int, noise: Noise,
               family: list[float] | None = None) -> RootPair | None:
    """The `RootPair` of one wire's ranked cells; None where sharded or root did not run."""
    sharded, root = (ranked[ranked["sync"] == sync] for sync in ("sharded", "root"))
    if sharded.empty or root.empty:
        return None
    mine, book = sharded.iloc[0], root.iloc[0]
    pair = sides_of(mine, book)
    sign = times_differ(mine["epoch_s"], book["epoch_s"], noise, pair, family)
    return RootPair(mine, book, pair, sign, k == 2 and bool(sign)
                     and _syncs_apart(mine, book, noise))


def _root_gap(mine: pd.Series, book: pd.Series, noise: Noise, syncs_apart: bool,
              epochs: pd.DataFrame | None = None) -> str:
    """Where sharded's epoch and root's differ at 2 workers, whose bytes are the same:
    the ways root moves them, where their seconds in sync differ too; else that the
    sums do not hold the gap, and where `epochs` has the two trials' steps, how it
    splits (`gap_parts`)."""
    if syncs_apart:
        return ("; the gap here comes then from how root moves them, its receive and send "
                "one after the other or its calls, and this sweep does not tell which")
    syncs = [sync_seconds(row) for row in (mine, book)]
    versus = compare_sync(*syncs, noise, sides_of(mine, book, "sync_s")).removesuffix(" from")
    # Not told apart is not absent (a grading): the sums may hold the gap or not.
    parts = gap_parts(mine, book, noise, epochs)
    return (f"; their seconds in sync, {seconds_text(syncs[0], 2)} s against root's "
            f"{seconds_text(syncs[1], 2)} s, were {versus}"
            + (f". {parts}" if parts else ": this sweep cannot say where the gap lies"))


def gap_parts(mine: pd.Series, book: pd.Series, noise: Noise,
               epochs: pd.DataFrame | None) -> str:
    """How root's epoch beyond sharded's splits on worker 0, whose epoch its parts sum
    to, from each trial's epochs in the window: its sums (with its wait for the other
    worker), its forward and backward (which no sync strategy changes: held to the
    epoch times' spread, seed for seed where the trials share their seed) and the rest
    of its steps (a grading read the split in report.md's scaling-model table, where
    the sheet said none was known). Empty unless both are single trials whose epochs
    recorded their compute."""
    if epochs is None or any(len(row.get("trial_ids", ())) != 1 for row in (mine, book)):
        return ""
    parts = []
    for row in (mine, book):
        steady = steady_epochs(epochs[epochs["trial_id"] == row["trial_id"]])
        if steady.empty or "worker_compute_s" not in steady:
            return ""
        compute = steady["worker_compute_s"].map(
            lambda values: (per_worker_values(values) or [float("nan")])[0])
        if compute.isna().any():
            return ""
        parts.append((steady["epoch_time_s"].mean(), compute.mean(),
                      steady["sync_time_s"].mean()))
    (epoch, compute, sync), (book_epoch, book_compute, book_sync) = parts
    rest, book_rest = epoch - compute - sync, book_epoch - book_compute - book_sync
    epoch_sides = sides_of(mine, book)
    test = noise.time_spread.test(compute, book_compute, tuple(
        Side(1, side.single_epoch, tuple((seed, value) for seed, _ in side.by_seed))
        for side, value in zip(epoch_sides, (compute, book_compute))))
    apart = test is not None and test.p < SIGNIFICANCE
    held = (f"; t = {test.t:.2f} against the epoch times' spread"
            f"{' seed for seed' if test.seeds else ''}, {p_text(test.p)}"
            if test is not None else "")
    # Root's parts less sharded's, or the other way where sharded's epoch was the longer.
    sign, longer, shorter = ((1, "root's", "sharded's") if book_epoch >= epoch
                             else (-1, "sharded's", "root's"))
    return (f"On worker 0, whose epoch these parts make up, {longer} "
            f"{sign * (book_epoch - epoch):.2f} s beyond {shorter} epoch (one trial each) "
            f"split into {sign * (book_sync - sync):.2f} s in the sums (its wait for the other "
            f"worker among them), {sign * (book_compute - compute):.2f} s in its forward and "
            f"backward ({seconds_text(book_compute, 2)} s on root against "
            f"{seconds_text(compute, 2)} s on sharded{held}), which no sync strategy changes, "
            f"and {sign * (book_rest - rest):.2f} s in the rest of its steps (the update, "
            f"which sharded makes on its 1/k of the parameters, and the batch's gathering; "
            f"not tested): "
            + ("the compute is told apart, though a strategy does not change it: the trials' "
               "placement or the machine's pace when each ran" if apart else
               "neither the sums nor the compute is told apart from one trial a side, so this "
               "sweep cannot say where the gap lies"))



def _syncs_apart(row: pd.Series, other: pd.Series, noise: Noise) -> bool:
    """Whether two cells' seconds in gradient sync were told apart (`Noise.sync_test`);
    True where they were not recorded or the sweep has no test of them."""
    if any(pd.isna(cell_row.get("sync_share")) for cell_row in (row, other)):
        return True
    syncs = [sync_seconds(cell_row) for cell_row in (row, other)]
    if not all(value > 0 for value in syncs):
        return False
    return not syncs_not_told_apart(*syncs, noise, sides_of(row, other, "sync_s"))


def root_short(root: RootPair | None, k: int, wire: str, noise: Noise,
                family: list[float] | None, fastest: pd.Series | None = None,
                use_gpu: bool = False) -> str:
    """`against_root`'s verdict in a sentence for the section's first paragraph; and
    where sharded lost to the wire's fastest strategy (`fastest`) and that strategy
    sums with the library's allreduce in a few buffers (ddp, bucketed), by how much."""
    if root is None:
        return ""
    mine, book = root.mine, root.book
    verdict = ratio_text(mine["epoch_s"], book["epoch_s"], noise, root.pair, family)
    same = ""
    if k == 2 and root.sign:
        same = (": at 2 both move the same bytes, and the gap is how root moves them, one "
                "way after the other and a call per tensor" if root.syncs_apart
                else ", but their seconds in sync were not told apart: this sweep cannot say "
                     "where the gap lies (root also makes a call per tensor, sharded "
                     + sharded_calls_a_step(use_gpu) + " a step)")
    text = (f" Here, at {k} workers through {wire or 'an unrecorded transport'}, sharded's "
            f"epochs were {verdict} root's{same}.")
    if fastest is not None and fastest["sync"] in ("ddp", "bucketed") and times_differ(
            mine["epoch_s"], fastest["epoch_s"], noise, sides_of(mine, fastest), family) > 0:
        lost = ratio_text(mine["epoch_s"], fastest["epoch_s"], noise, sides_of(mine, fastest),
                          family)
        # Not a cause: the calls are one difference of several (a grading).
        overlap = ", overlapped with its backward" if fastest["sync"] == "ddp" else ""
        text += (f" The library's own allreduce did better than the exercise's: sharded's "
                 f"epochs were {lost} {fastest['sync']}'s, which sums in allreduces of a few "
                 f"buffers{overlap}, where sharded makes {sharded_steps_calls(use_gpu)}: how "
                 f"much of the gap those calls make, the paragraphs below bound but do not "
                 f"settle.")
    return text


def root_per_call(wire: str, k: int, gradient_bytes: int | None, sums: list[dict]) -> str:
    """The calibration's own timings of root's pattern against a reduce-scatter and
    all-gather on `wire` at `k` workers, one flat buffer each: at the two sizes timed
    around a step's `gradient_bytes`, and how many of the sizes timed root was the
    faster at (a grading: the bytes-bound prediction was offered as the reason sharded
    beat root, where the calibration timed root the faster at most sizes). Empty where
    it timed not both around that size."""
    timed = [sum_timings(sums, transport, k)
             for transport in (f"{wire} {ROOT_FUNNEL}", f"{wire} {SHARDED_PAIR}")]
    sizes = sorted(set(timed[0]) & set(timed[1]))
    # The sizes timed around a step's bytes, each shown: one noisy size would sway an
    # interpolation between them.
    around = [size for size in ([max((size for size in sizes if size <= gradient_bytes),
                                     default=None),
                                 min((size for size in sizes if size >= gradient_bytes),
                                     default=None)] if gradient_bytes else [])
              if size is not None]
    if not sizes or len(around) < 2:
        return ""
    faster = sum(timed[0][size] < timed[1][size] for size in sizes)
    shown = " and ".join(f"{size / 1e6:.3g}" for size in dict.fromkeys(around))

    def both(timings: dict) -> str:
        return " and ".join(f"{1000 * timings[size]:.2g}" for size in dict.fromkeys(around))

    return (f". That is a bytes-bound link's prediction. On this sweep's transport, {wire}, "
            f"the calibration timed one flat buffer of {shown} MB, around the step's "
            f"{gradient_bytes / 1e6:.2f} MB, through root in "
            f"{both(timed[0])} ms against {both(timed[1])} ms for a reduce-scatter and "
            f"all-gather, and root the faster at {faster} of the {len(sizes)} sizes it timed"
            + (": here the ring's pattern saves no time a call (two processes of one "
               "machine copy through memory rather than share a link, and gloo's "
               "reduce-scatter writes the whole gradient, below), so a gap between their "
               "epochs is not the aggregation's" if 2 * faster > len(sizes) else ""))


def against_root(ranked: pd.DataFrame, k: int, noise: Noise,
                  family: list[float] | None = None, root: RootPair | None = None,
                  use_gpu: bool = False, epochs: pd.DataFrame | None = None,
                  per_call: str = "") -> str:
    """The exercise's own question, put to one wire's cells at `k` workers: was its
    aggregation on different workers (sharded) faster than the book's allreduce
    (root)? Adjusted within `family` (exercise_13_5_3.py's `_pairs_family`); `root`:
    their `RootPair` where the caller has it; empty where one of them did not run."""
    root = root or root_pair(ranked, k, noise, family)
    if root is None:
        return ""
    mine, book = root.mine, root.book
    versus = compare_times(mine["epoch_s"], book["epoch_s"], noise, root.pair, family=family)
    why = ""
    if k == 2:
        why = (": at 2 workers both move a step's gradients once each way (the table above), "
               "so aggregating on different workers saves bytes only from 3 workers on, but "
               "time from 2 on a link that bytes bound: root's one receive, then one send, "
               "take twice a link's time" + per_call)
        if root.sign:  # a gap to explain: the pair differs in its calls too
            why += (". The pair also differs in its calls: root makes a blocking one per "
                    "parameter tensor (the book's loop), sharded "
                    + sharded_steps_calls(use_gpu) + ", its gradients in one flat buffer"
                    + _root_gap(mine, book, noise, root.syncs_apart, epochs))
    return (f"The exercise's aggregation on different workers (sharded) was {versus} the "
            f"book's allreduce (root, {seconds_text(book['epoch_s'])} s, "
            f"{seeds_text(book['seeds'])}){why}.")


def sum_timings(sums: list[dict], transport: str, k: int) -> dict[int, float]:
    """The calibration's timed sums (calibration.json's `allreduce`) of `transport` at
    `k` workers: {bytes: seconds}."""
    return {sample["bytes"]: sample["seconds"] for sample in sums
            if sample["transport"] == transport and sample["num_workers"] == k}


def interpolated(timings: dict[int, float], size: float) -> float | None:
    """Seconds at `size` bytes, linear in bytes between the two sizes timed around it
    (a sum's time is a latency plus bytes over a bandwidth); None outside them."""
    below = [timed for timed in timings if timed <= size]
    above = [timed for timed in timings if timed >= size]
    if not below or not above:
        return None
    low, high = max(below), min(above)
    if low == high:
        return timings[low]
    share = (size - low) / (high - low)
    return timings[low] + share * (timings[high] - timings[low])
