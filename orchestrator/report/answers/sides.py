"""The two sides of a comparison of times: how many trials (seeds) each averages,
whether each was timed over one epoch, and each seed's time, so that two sides that
ran seeds in common are compared seed for seed (`matched`): the sweep runs its seeds
one after the other, and a drift of the machine's pace then cancels.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Side:
    """One side of a comparison of times: how many trials (seeds) its time averages,
    whether each was timed over one epoch (a 2-epoch trial's window), and the time of
    each of its seeds, (seed, seconds), where known (`of`)."""

    trials: int = 1
    single_epoch: bool = False
    by_seed: tuple[tuple[float, float], ...] = ()

    @classmethod
    def of(cls, row, column: str = "epoch_s") -> "Side":
        """A trial's or a cell's side for its `column`: its `seeds` (1 where not
        counted), whether it timed one epoch (`timed_epoch_count`, which noise.py's `prepared`
        adds; unknown: several), and its seeds' `column` (a cell's `by_seed`, a
        trial's own seed)."""
        seeds, by_seed = row.get("seeds", 1), _by_seed(row, column)
        counted_seeds = int(seeds) if seeds and not pd.isna(seeds) else 1
        # A seed with no time in `column` (NaN) is in no side's mean: not counted.
        return cls(len(by_seed) if by_seed else counted_seeds,
                   row.get("timed_epoch_count", 2) == 1, by_seed)


def _by_seed(row, column: str) -> tuple[tuple[float, float], ...]:
    by_seed, seed_ids = row.get("by_seed"), row.get("seed_ids")
    if isinstance(by_seed, dict) and column in by_seed and seed_ids is not None:
        pairs = zip(seed_ids, by_seed[column])
    else:
        seed, value = row.get("seed"), row.get(column)
        pairs = [] if seed is None or value is None or pd.isna(seed) else [(seed, value)]
    return tuple((float(seed), float(value)) for seed, value in pairs if value > 0)


Sides = tuple[Side, Side]
# Two trials of one seed: the sides of the smallest gap told apart seed for seed.
ONE_SEED_EACH = (Side(1, False, ((0.0, 1.0),)), Side(1, False, ((0.0, 1.0),)))
# The same, one of them timed over one epoch.
ONE_SEED_ONE_EPOCH = (ONE_SEED_EACH[0], Side(1, True, ((0.0, 1.0),)))


def sides_of(row, other, column: str = "epoch_s") -> Sides:
    """The two sides of a comparison of `row`'s `column` with `other`'s ("sync_s": the
    seconds in sync, `sync_share` of `epoch_s`)."""
    return Side.of(row, column), Side.of(other, column)


def as_sides(sides: Sides | bool) -> Sides:
    """`sides`, or for a bool two 1-trial sides timed over one epoch or not."""
    if isinstance(sides, (bool, np.bool_)):
        return Side(1, bool(sides)), Side(1, bool(sides))
    return sides


def matched(sides: Sides | bool) -> tuple[Sides, tuple[float, ...]]:
    """The two sides restricted to the seeds they share, and those seeds; the sides
    unchanged and () where they share none (or their seeds are unknown). The sweep
    runs its seeds one after the other, so a seed is also a stretch of the machine's
    time: compared seed for seed, a drift of its pace cancels."""
    first, second = as_sides(sides)
    shared = sorted(set(dict(first.by_seed)) & set(dict(second.by_seed)))
    if not shared:
        return (first, second), ()
    return tuple(Side(len(shared), side.single_epoch,
                      tuple(pair for pair in side.by_seed if pair[0] in shared))
                 for side in (first, second)), tuple(shared)


def of_means(sides: Sides | bool) -> str:
    """For a ratio printed beside a comparison made seed for seed on fewer seeds than
    a side ran (`matched`): " of the means, every seed", which says it is not the
    compared times'; else empty."""
    return " of the means, every seed" if fewer_seeds(sides, matched(sides)[1]) else ""


def fewer_seeds(sides: Sides | bool, seeds: tuple[float, ...]) -> bool:
    """Whether the shared `seeds` (`matched`) are fewer than a side ran."""
    return bool(seeds) and any(len(side.by_seed) > len(seeds) for side in as_sides(sides))


def any_single(sides: Sides | bool) -> bool:
    """Whether a side was timed over one epoch."""
    return any(side.single_epoch for side in as_sides(sides))


def describe_side(side: Side) -> str:
    """"a trial", "a mean of 3 seeds", "a trial timed over one epoch", ..."""
    what = "a trial" if side.trials == 1 else f"a mean of {side.trials} seeds"
    return what + (" timed over one epoch" if side.single_epoch else "")
