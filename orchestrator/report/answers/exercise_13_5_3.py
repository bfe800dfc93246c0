"""13.5.3, a more efficient allreduce, answered from a sweep's trials: the sync
strategies' epochs ranked within each transport, the bytes per step of the
book's allreduce against a reduce-scatter and all-gather, and why aggregating
different parameters on different workers is more efficient."""

import itertools

import pandas as pd

from orchestrator.records import (FINITE_CHECK_INTERVAL_STEPS, ROOT_FUNNEL, SHARDED_PAIR,
                                  seconds_text)
from orchestrator.report.answers.cells import (cells, part_trials, speedup_text, sync_seconds,
                                               timed, with_speedups)
from orchestrator.report.answers.compare import (compare_sync, compare_times,
                                                 syncs_not_told_apart, times_differ)
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.root_funnel import (against_root, gap_interval, interpolated,
                                                     root_pair, root_per_call, root_short,
                                                     sharded_steps_calls, sum_timings)
from orchestrator.report.answers.sides import sides_of
from orchestrator.report.answers.time_spread import drift_adjusted
from orchestrator.report.answers.wording import (in_short, missing_part, one_worker_count,
                                                 percent, seeds_text)
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
    timed_at = [sum_timings(sums, transport, k) for transport in (f"{wire} {SHARDED_PAIR}", wire)]
    at_size = [interpolated(timings, gradient_bytes) for timings in timed_at]
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
            + gap_interval(noise.sync_test(sharded_sync, fastest_sync, sides), extra_s, gap_s))


def _pairs_family(ranked: pd.DataFrame, noise: Noise) -> list[float] | None:
    """The p-values of every pair of `ranked`'s cells (`LogSpread.test` of their
    epochs), the family a ranking's comparisons are adjusted within; None where the
    sweep tests no times."""
    rows = [row for _, row in ranked.iterrows()]
    tests = [noise.time_spread.test(row["epoch_s"], other["epoch_s"], sides_of(row, other))
             for row, other in itertools.combinations(rows, 2)]
    return [test.p for test in tests] if tests and None not in tests else None


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
        root = root_pair(ranked, k, noise, family)
        per_call = root_per_call(wire, k, gradient_bytes, sums) if k == 2 else ""
        sentences += [text for text in [against_root(ranked, k, noise, family, root,
                                                      use_gpu, epochs, per_call)] if text]
        measured = measured or root_short(root, k, wire, noise, family, fastest, use_gpu)
    if at_k["wire"].nunique() > 1:
        by_wire = "; ".join(f"{', '.join(rows['sync'])} through {wire}"
                            for wire, rows in at_k.groupby("wire", sort=True))
        sentences.append(f"Strategies of different transports are not ranked against each "
                         f"other ({by_wire}): their difference is mostly the transport.")
    return [in_short(SHORT + measured), *paragraphs, " ".join(sentences), WHY_SPLIT]
