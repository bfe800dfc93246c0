"""13.5.3, a more efficient allreduce, answered from a sweep's trials: the sync
strategies' epochs ranked within each transport, the bytes per step of the
book's allreduce against a reduce-scatter and all-gather, and why aggregating
different parameters on different workers is more efficient."""

import itertools
from typing import NamedTuple

import pandas as pd

from orchestrator.records import (FINITE_CHECK_INTERVAL_STEPS, ROOT_FUNNEL, SHARDED_PAIR,
                                  seconds_text)
from orchestrator.report.answers.cells import (cells, part_trials, speedup_text, sync_seconds,
                                               timed, with_speedups)
from orchestrator.report.answers.compare import (compare_sync, compare_times, ratio_text,
                                                 syncs_not_told_apart, times_differ)
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.sides import Side, Sides, sides_of
from orchestrator.report.answers.time_spread import drift_adjusted
from orchestrator.report.answers.welch import SIGNIFICANCE, p_text
from orchestrator.report.answers.wording import (in_short, missing_part, one_worker_count,
                                                 percent, seeds_text)
from orchestrator.report.summary import per_worker_values, steady_epochs
from orchestrator.report.tables import markdown_table


# Worker counts the bytes table of 13.5.3 shows, beside the sweep's own.
BYTES_WORKERS = (2, 4, 8, 16)
# Sharded's sync seconds over the fastest strategy's beyond which 13.5.3 says why, from
# the calibration's timings (a sum's noise is not measured; this is a gap to explain,
# not a finding claimed).
SHARDED_SYNC_RATIO = 1.5
ROOT_VS_RING_COMMAND = "python bench/root_vs_ring.py --workers 2,3,4 --rate 50mbit"
SHORT = (
    "Summing a different part of the parameters on each worker (a reduce-scatter, then an "
    "all-gather) sends 2(k-1)/k of the gradients through every link at once, where the book's "
    "allreduce sends k-1 copies through worker 0's, one way after the other, while every "
    "other worker's carries one and waits on it: on a link that bytes bound, the ring takes "
    "2(k-1)/k of a gradient's time where root takes 2(k-1), half at 2 workers and less with "
    "each worker more. Small messages are bound by latency instead, where the ring's 2(k-1) "
    "steps a call can lose.")
WHY_SPLIT = (
    "Why aggregating different parameters on different workers is more efficient: in the "
    "book's allreduce one worker receives, sums and sends back every gradient, so its link "
    "carries k-1 copies each way, one way after the other, growing with k while the other "
    "links idle. When each of the k workers sums a different 1/k of the parameters "
    "(reduce-scatter) and then sends its sums to the others (all-gather), every link carries "
    "2(k-1)/k copies each way at once: under 2 at any k, the least any allreduce can move "
    "(Patarasuk and Yuan, 2009; Thakur et al., 2005). That is what a ring allreduce does "
    "inside, so gloo's and NCCL's allreduce (ddp; scratch and bucketed across nodes or on "
    "GPUs) and, for CPU workers of one node, its shared memory (scratch and bucketed) already "
    "aggregate this way; what tells "
    "them apart is how many calls a step makes (scratch one per tensor, bucketed and ddp a few "
    "buffers, ddp overlapped with backward). Sharded's keeping only its 1/k of the update and "
    "optimizer state (ZeRO-1, Rajbhandari et al., 2020) saves memory and (k-1)/k of the update's "
    "arithmetic, not bytes: a ring's reduce-scatter and all-gather move what a ring allreduce "
    "moves, and gloo's move more (its reduce-scatter writes the whole gradient where a ring's "
    "writes (k-1)/k of it: `bench/sync_strategies.py` in docs/BENCHMARKS.md); with the book's "
    "plain SGD (momentum 0) there is no optimizer state to shard, so "
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


def sharded_calls(sharded: pd.Series, fastest: pd.Series, wire: str, k: int,
                  gradient_bytes: int | None, sums: list[dict], noise: Noise,
                  use_gpu: bool = False) -> str:
    """How much of sharded's longer sync than the fastest strategy's through `wire`
    (it moves a ring's bytes) the calibration's timings explain: its reduce-scatter
    and all-gather pair against one allreduce of a step's `gradient_bytes`
    (interpolated between the sizes it timed), times the steps of an epoch; where the
    two syncs are not told apart (`Noise.sync_test`), only what the calibration would
    add. Empty where sharded's sync took less than SHARDED_SYNC_RATIO times the
    fastest's (or the fastest's none), or the calibration timed not both around that
    size."""
    sharded_sync, fastest_sync = (sync_seconds(row) for row in (sharded, fastest))
    if (not gradient_bytes or not fastest_sync > 0
            or not sharded_sync > SHARDED_SYNC_RATIO * fastest_sync):
        return ""
    timed_at = [_timings(sums, transport, k) for transport in (f"{wire} {SHARDED_PAIR}", wire)]
    at_size = [_interpolated(timings, gradient_bytes) for timings in timed_at]
    if None in at_size:
        return ""
    (pair, one), steps = at_size, int(sharded["steps_per_epoch"])
    # Its finite check's one-element sum, at most the smallest allreduce timed: a latency.
    smallest = timed_at[1][min(timed_at[1])]
    checks = steps / FINITE_CHECK_INTERVAL_STEPS.get("cuda" if use_gpu else "cpu", 1)
    sides = sides_of(sharded, fastest, "sync_s")
    extra_s = (pair - one) * steps + smallest * checks
    gap_s = sharded_sync - fastest_sync
    spent = (f"Sharded spent {seconds_text(sharded_sync)} s of its epoch in gradient sync, "
             f"{compare_sync(sharded_sync, fastest_sync, noise, sides)} {fastest['sync']}'s "
             f"{seconds_text(fastest_sync)} s")
    calibrated = (f"At its {gradient_bytes / 1e6:.2f} MB a step the calibration timed {wire}'s "
                  f"reduce-scatter and all-gather at {1000 * pair:.2g} ms against "
                  f"{1000 * one:.2g} ms for its allreduce of the same bytes (calibration.json, "
                  f"between the sizes it timed), and its smallest allreduce timed "
                  f"({min(timed_at[1]):,} bytes) at {1000 * smallest:.2g} ms, an upper bound of "
                  f"the finite check's one-element sum")
    calls = sharded_steps_calls(use_gpu)
    if syncs_not_told_apart(sharded_sync, fastest_sync, noise, sides):
        return (f"{spent}: this sweep does not tell the two syncs apart. {calibrated}"
                + (f": {calls} where an allreduce makes one would add up to "
                   f"{seconds_text(extra_s)} s over an epoch's {steps} steps."
                   if extra_s > 0 else "."))
    if pair <= one:
        return (f"{spent}; the calibration timed {wire}'s reduce-scatter and all-gather no "
                f"slower than its allreduce of the same bytes, so its timings do not explain "
                f"the gap beyond the finite check's one-element sum (up to "
                f"{seconds_text(smallest * checks, 2)} s an epoch).")
    return (f"{spent}. {calibrated}: {calls} where an allreduce makes one, up to "
            f"{seconds_text(extra_s)} s more over an epoch's {steps} steps, "
            f"{percent(min(extra_s / gap_s, 1.0))} of the {seconds_text(gap_s)} s gap"
            + _gap_interval(noise.sync_test(sharded_sync, fastest_sync, sides), extra_s, gap_s))


def _gap_interval(test, extra_s: float, gap_s: float) -> str:
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


def _pairs_family(ranked: pd.DataFrame, noise: Noise) -> list[float] | None:
    """The p-values of every pair of `ranked`'s cells (`LogSpread.test` of their
    epochs), the family a ranking's comparisons are adjusted within; None where the
    sweep tests no times."""
    rows = [row for _, row in ranked.iterrows()]
    tests = [noise.time_spread.test(row["epoch_s"], other["epoch_s"], sides_of(row, other))
             for row, other in itertools.combinations(rows, 2)]
    return [test.p for test in tests] if tests and None not in tests else None


class _RootPair(NamedTuple):
    """Sharded's and root's cells at one wire's `k` workers, as the exercise's own
    question compares them: their sides, the sign of their epochs' gap (`times_differ`,
    within the ranking's family) and, at 2 workers where that gap is told apart,
    whether their seconds in sync are too (`_syncs_apart`)."""
    mine: pd.Series
    book: pd.Series
    pair: Sides
    sign: int
    syncs_apart: bool


def _root_pair(ranked: pd.DataFrame, k: int, noise: Noise,
               family: list[float] | None = None) -> _RootPair | None:
    """The `_RootPair` of one wire's ranked cells; None where sharded or root did not run."""
    sharded, root = (ranked[ranked["sync"] == sync] for sync in ("sharded", "root"))
    if sharded.empty or root.empty:
        return None
    mine, book = sharded.iloc[0], root.iloc[0]
    pair = sides_of(mine, book)
    sign = times_differ(mine["epoch_s"], book["epoch_s"], noise, pair, family)
    return _RootPair(mine, book, pair, sign, k == 2 and bool(sign)
                     and _syncs_apart(mine, book, noise))


def _root_gap(mine: pd.Series, book: pd.Series, noise: Noise, syncs_apart: bool,
              epochs: pd.DataFrame | None = None) -> str:
    """Where sharded's epoch and root's differ at 2 workers, whose bytes are the same:
    the ways root moves them, where their seconds in sync differ too; else that the
    sums do not hold the gap, and where `epochs` has the two trials' steps, how it
    splits (`_gap_parts`)."""
    if syncs_apart:
        return ("; the gap here comes then from how root moves them, its receive and send "
                "one after the other or its calls, and this sweep does not tell which")
    syncs = [sync_seconds(row) for row in (mine, book)]
    versus = compare_sync(*syncs, noise, sides_of(mine, book, "sync_s")).removesuffix(" from")
    # Not told apart is not absent (a grading): the sums may hold the gap or not.
    parts = _gap_parts(mine, book, noise, epochs)
    return (f"; their seconds in sync, {seconds_text(syncs[0], 2)} s against root's "
            f"{seconds_text(syncs[1], 2)} s, were {versus}"
            + (f". {parts}" if parts else ": this sweep cannot say where the gap lies"))


def _gap_parts(mine: pd.Series, book: pd.Series, noise: Noise,
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


def _root_short(root: _RootPair | None, k: int, wire: str, noise: Noise,
                family: list[float] | None, fastest: pd.Series | None = None,
                use_gpu: bool = False) -> str:
    """`_against_root`'s verdict in a sentence for the section's first paragraph; and
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


def _root_per_call(wire: str, k: int, gradient_bytes: int | None, sums: list[dict]) -> str:
    """The calibration's own timings of root's pattern against a reduce-scatter and
    all-gather on `wire` at `k` workers, one flat buffer each: at the two sizes timed
    around a step's `gradient_bytes`, and how many of the sizes timed root was the
    faster at (a grading: the bytes-bound prediction was offered as the reason sharded
    beat root, where the calibration timed root the faster at most sizes). Empty where
    it timed not both around that size."""
    timed = [_timings(sums, transport, k)
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


def _against_root(ranked: pd.DataFrame, k: int, noise: Noise,
                  family: list[float] | None = None, root: _RootPair | None = None,
                  use_gpu: bool = False, epochs: pd.DataFrame | None = None,
                  per_call: str = "") -> str:
    """The exercise's own question, put to one wire's cells at `k` workers: was its
    aggregation on different workers (sharded) faster than the book's allreduce
    (root)? Adjusted within `family` (`_pairs_family`); `root`: their `_RootPair`
    where the caller has it; empty where one of them did not run."""
    root = root or _root_pair(ranked, k, noise, family)
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


def _timings(sums: list[dict], transport: str, k: int) -> dict[int, float]:
    """The calibration's timed sums (calibration.json's `allreduce`) of `transport` at
    `k` workers: {bytes: seconds}."""
    return {sample["bytes"]: sample["seconds"] for sample in sums
            if sample["transport"] == transport and sample["num_workers"] == k}


def _interpolated(timings: dict[int, float], size: float) -> float | None:
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


def _wire(transport: str) -> str:
    """The transport a strategy's bytes travel: the book's root funnel goes over its
    backend's sends and receives ("gloo root"), the same wire as that backend's ring."""
    return transport.removesuffix(f" {ROOT_FUNNEL}")


def answer_13_5_3(summary: pd.DataFrame, noise: Noise, gradient_bytes: int | None = None,
                  sums: list[dict] = (), use_gpu: bool = False,
                  epochs: pd.DataFrame | None = None) -> list[str]:
    """`gradient_bytes`: one step's gradients of the sweep's model (the calibration's);
    `sums`: the calibration's timed sums (calibration.json's `allreduce`); `epochs`:
    the sweep's epochs, where a gap is split into its parts."""
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
            f"The table's ratios are predictions, not this sweep's measurements: "
            f"`{ROOT_VS_RING_COMMAND}` measures them at k = 2, 3 and 4 on nodes joined by a "
            f"capped link, where bytes set the time (docs/BENCHMARKS.md, root_vs_ring: each "
            f"rank's bytes written to its sockets and seconds per step beside these "
            f"predictions)."]
    if strategies["num_workers"].nunique() < 2:
        return [*paragraphs, one_worker_count(strategies), WHY_SPLIT]
    at_k = table[table["num_workers"] == k].assign(wire=lambda rows: rows["transport"].map(_wire))
    sentences, measured = [], ""
    # Ranked within a wire only: across wires the ranking measures the wire.
    for wire, ranked in at_k.groupby("wire", sort=True):
        # Ranked on times with each seed's drift taken out: a mean over later seeds
        # carries their slower (or faster) pace (the sweep runs seeds in turn).
        adjusted = [drift_adjusted(row, noise.time_spread) for _, row in ranked.iterrows()]
        ranked = ranked.assign(ranked_s=[time_s for time_s, _ in adjusted]).sort_values(
            "ranked_s")
        drift = (" (each seed's drift taken out)"
                 if any(shifted for _, shifted in adjusted) else "")
        fastest, rest = ranked.iloc[0], [row for _, row in ranked.iloc[1:].iterrows()]
        # Every pair of the wire's strategies is one family (the fastest is picked
        # from the same times), told apart by Holm's adjustment of their p-values
        # where the sweep tests times.
        family = _pairs_family(ranked, noise)
        versus = [compare_times(fastest["epoch_s"], row["epoch_s"], noise,
                                sides_of(fastest, row), family=family) for row in rest]
        others = ", ".join(
            f"{verdict} {row['sync']} ({seconds_text(row['epoch_s'])} s, "
            f"{seeds_text(row['seeds'])})" for verdict, row in zip(versus, rest))
        others = f"; it was {others}" if others else ""
        # Not told apart from the runner-up, the ranking's first is no finding: its
        # test may even compare times in the other order (seed for seed, where the
        # ranking takes each seed's drift out of every seed's).
        tied = bool(rest) and not times_differ(fastest["epoch_s"], rest[0]["epoch_s"], noise,
                                               sides_of(fastest, rest[0]), family)
        lead = (f"no epoch was told apart as the shortest; the shortest by the means{drift} "
                f"was {fastest['sync']}'s:" if tied else
                f"the shortest epoch{drift} was {fastest['sync']}'s:")
        sentences.append(
            f"At {k} workers through {wire or 'an unrecorded transport'}, {lead} "
            f"{seconds_text(fastest['epoch_s'])} s "
            f"({seeds_text(fastest['seeds'])}), {percent(fastest['sync_share'])} of it in "
            f"gradient sync, {speedup_text(fastest, fastest['speedup'])}{others}.")
        sharded = ranked[ranked["sync"] == "sharded"]
        if not sharded.empty and fastest["sync"] != "sharded":
            sentences += [text for text in [sharded_calls(sharded.iloc[0], fastest, wire, k,
                                                          gradient_bytes, sums, noise,
                                                          use_gpu)] if text]
        root = _root_pair(ranked, k, noise, family)
        per_call = _root_per_call(wire, k, gradient_bytes, sums) if k == 2 else ""
        sentences += [text for text in [_against_root(ranked, k, noise, family, root,
                                                      use_gpu, epochs, per_call)] if text]
        measured = measured or _root_short(root, k, wire, noise, family, fastest, use_gpu)
    if at_k["wire"].nunique() > 1:
        by_wire = "; ".join(f"{', '.join(rows['sync'])} through {wire}"
                            for wire, rows in at_k.groupby("wire", sort=True))
        sentences.append(f"Strategies of different transports are not ranked against each "
                         f"other ({by_wire}): their difference is mostly the transport.")
    return [in_short(SHORT + measured), *paragraphs, " ".join(sentences), WHY_SPLIT]
