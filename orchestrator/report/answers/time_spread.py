"""How a time measured each epoch varies, from the sweep's repeated identical work
(`LogSpread`, `log_spread`), and the test that tells two times apart against it
(`LogSpread.test`: Student's t on their logs, `TimeTest`); each seed's fitted shift
taken out of a time to rank cells of different seeds alike (`drift_adjusted`).
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from orchestrator.records import counted
from orchestrator.report.answers.seed_blocks import blocked_fit
from orchestrator.report.answers.sides import Side, Sides, fewer_seeds, matched
from orchestrator.report.answers.welch import (MIN_TEST_DOF, SIGNIFICANCE, power_factor,
                                               t_quantile, t_two_sided_p)


class TimeTest(NamedTuple):
    """Student's t of two times on their logs and its two-sided p; the two times it
    compared (each side's mean over `seeds`, the seeds the sides share, where they
    share some) and whether those are fewer than a side's own (`subset`)."""

    t: float
    p: float
    time_s: float
    other_s: float
    seeds: tuple[float, ...] = ()
    subset: bool = False
    error: float = math.nan
    """The standard error of the log ratio."""
    dof: int = 0

    def ratio_interval(self) -> tuple[float, float]:
        """The 95% (1 - SIGNIFICANCE) confidence interval of `time_s` / `other_s`."""
        half = t_quantile(SIGNIFICANCE, self.dof) * self.error
        ratio = math.log(self.time_s / self.other_s)
        return math.exp(ratio - half), math.exp(ratio + half)


@dataclass(frozen=True)
class LogSpread:
    """How a time measured each epoch (an epoch's seconds, its seconds in gradient sync,
    its test set's scoring) varies, in natural log, estimated from the sweep's repeated
    identical work: `sd`, a trial's mean over its window about the mean of the trials
    of its identical work (between trials: what two trials' comparison faces, a
    placement or the machine's pace in that minute as well as the epochs' own jitter),
    `blocked_sd`, the same once each seed's shift is taken out (the sweep runs its
    seeds one after the other: two sides compared seed for seed face only this), and
    `epoch_sd`, one epoch about its trial's mean (within a trial). Two times are told
    apart by Student's t on their logs with the between-trial degrees of freedom; the
    epochs of one trial are not independent replicas, the trials are."""

    sd: float = math.nan
    dof: int = 0
    """Trials of repeated identical work, less one per group of it; under MIN_TEST_DOF,
    no test (`tests`)."""
    trials: int = 0
    groups: int = 0
    epoch_sd: float = math.nan
    epoch_dof: int = 0
    """Epochs of trials that timed two or more, less one per trial."""
    blocked_sd: float = math.nan
    blocked_dof: int = 0
    """Those trials less one per group and one per seed beyond the first; 0: no seed
    shift estimated (one seed, or too few trials), and `sd` holds for matched sides."""
    seed_shifts: tuple[tuple[float, float], ...] = ()
    """(seed, its trials' shift in log from the first seed's), where estimated."""
    sources: tuple[str, ...] = ()
    """The names of the groups it came from (their sync strategies), where given."""

    @property
    def tests(self) -> bool:
        """Whether its degrees of freedom carry a t test (MIN_TEST_DOF)."""
        return self.dof >= MIN_TEST_DOF

    def _spread(self, blocked: bool) -> tuple[float, int]:
        if blocked and self.blocked_dof >= MIN_TEST_DOF:
            return self.blocked_sd, self.blocked_dof
        return self.sd, self.dof

    def side_variance(self, side: Side, sd: float | None = None) -> float:
        """The variance, in log, of one side's time: a trial's over the trials it
        averages (its seeds), and where it was timed over one epoch, one trial's and
        one epoch's together (which counts the epoch's jitter twice, once within the
        trial's: conservative)."""
        variance = (self.sd if sd is None else sd) ** 2
        if side.single_epoch and self.epoch_dof:
            variance += self.epoch_sd ** 2
        return variance / max(side.trials, 1)

    def test(self, time_s: float, other_s: float,
             sides: Sides | bool = False) -> TimeTest | None:
        """Student's t of two times on their logs, each side's variance its own
        (`side_variance`), and its two-sided p; where the sides share seeds (`matched`),
        of their means over those seeds against the spread left once each seed's
        shift is out. None where the sweep measured no such spread, or a side is not
        a positive time. `sides`: the two sides (`sides.sides_of`), or a bool for two
        1-trial sides, timed over one epoch or not."""
        if not self.tests or not (time_s > 0 and other_s > 0):
            return None
        compared, seeds, error, dof = self._compared(sides)
        if seeds:
            time_s, other_s = (float(np.mean([value for _, value in side.by_seed]))
                               for side in compared)
        # The gap from the longer to the shorter, so that a pair tested either way round
        # gets the very same p (a ranking's family is looked up by it).
        gap = math.log(max(time_s, other_s)) - math.log(min(time_s, other_s))
        t = (gap if time_s >= other_s else -gap) / error
        return TimeTest(t, t_two_sided_p(gap / error, dof), time_s, other_s, seeds,
                        fewer_seeds(sides, seeds), error, dof)

    def resolution(self, sides: Sides | bool = False) -> float:
        """The smallest gap (the longer over the shorter, less 1) `test` tells apart at
        p < SIGNIFICANCE between such `sides`; NaN without a spread."""
        if not self.dof:
            return math.nan
        _, _, error, dof = self._compared(sides)
        return math.expm1(t_quantile(SIGNIFICANCE, dof) * error)

    def detectable(self, sides: Sides | bool = False) -> float:
        """The gap (the longer over the shorter, less 1) `test` calls at p < SIGNIFICANCE
        with probability POWER between such `sides` (`welch.power_factor`); NaN without
        a spread. `resolution` is the gap it calls half the time."""
        if not self.dof:
            return math.nan
        _, _, error, dof = self._compared(sides)
        return math.expm1(power_factor(dof) * error)

    def _compared(self, sides: Sides | bool) -> tuple[Sides, tuple[float, ...], float, int]:
        """The sides as compared (`matched`), the seeds they share, and the standard
        error of the difference of their log times with its degrees of freedom: on the
        spread left once each seed's shift is out where they share seeds."""
        compared, seeds = matched(sides)
        sd, dof = self._spread(bool(seeds))
        return compared, seeds, math.sqrt(sum(self.side_variance(side, sd)
                                              for side in compared)), dof

    def figures(self) -> str:
        """The spread and where it came from, for a sentence: "0.020 in natural log (a
        factor of 1.021; 34 trials in 4 groups, 30 degrees of freedom)"."""
        return (f"{self.sd:.3f} in natural log (a factor of {math.exp(self.sd):.3f}; "
                f"{self.trials} trials in {counted(self.groups, 'group')}, "
                f"{counted(self.dof, 'degree')} of freedom)")


def log_spread(groups: list, epoch_logs: list | None = None,
               group_seeds: list | None = None, names: list | None = None) -> LogSpread:
    """The `LogSpread` of `groups` of trials' times (each an array of seconds, one a
    trial, the trials of one group doing identical work; `group_seeds`, their seeds
    alike; `names`, what each group is) and of `epoch_logs` (each a trial's single
    epochs' seconds, in log); no
    test where no group repeats or none spreads (a spread no real run has)."""
    sd, dof = _pooled([np.log(np.asarray(times, dtype=float)) for times in groups])
    repeated = [index for index, times in enumerate(groups) if len(times) > 1]
    epoch_sd, epoch_dof = _pooled([np.asarray(logs, dtype=float) for logs in epoch_logs or ()])
    if not dof:
        return LogSpread(epoch_sd=epoch_sd, epoch_dof=epoch_dof)
    blocked = (blocked_fit([np.log(np.asarray(groups[index], dtype=float))
                            for index in repeated],
                           [np.asarray(group_seeds[index], dtype=float) for index in repeated])
               if group_seeds is not None else (math.nan, 0, ()))
    sources = tuple(sorted({names[index] for index in repeated})) if names else ()
    return LogSpread(sd, dof, sum(len(groups[index]) for index in repeated), len(repeated),
                     epoch_sd, epoch_dof, *blocked, sources)


def _pooled(samples: list) -> tuple[float, int]:
    """The pooled standard deviation of `samples` about each one's mean and its degrees
    of freedom; (NaN, 0) where none has two values, or none spreads."""
    samples = [values for values in samples if len(values) > 1]
    dof = sum(len(values) - 1 for values in samples)
    squares = sum(float(((values - values.mean()) ** 2).sum()) for values in samples)
    if not dof or not squares > 0:
        return math.nan, 0
    return math.sqrt(squares / dof), dof


def drift_adjusted(row, spread: LogSpread, column: str = "epoch_s") -> tuple[float, bool]:
    """`row`'s `column` with each seed's fitted shift (`LogSpread.seed_shifts`) taken
    out: the geometric mean over its seeds of each seed's time over its shift, for
    ranking cells of different seeds alike; and whether any shift was taken out.
    The row's own `column` where it has no seeds' times or the sweep no shifts it
    tests on (under MIN_TEST_DOF degrees of freedom left, as noise.py's `seed_drift` says none)."""
    shifts = dict(spread.seed_shifts) if spread.blocked_dof >= MIN_TEST_DOF else {}
    by_seed = Side.of(row, column).by_seed
    if not shifts or not by_seed:
        return row[column], False
    logs = [math.log(value) - shifts.get(seed, 0.0) for seed, value in by_seed]
    return math.exp(sum(logs) / len(logs)), any(seed in shifts for seed, _ in by_seed)
