"""Accuracies by seed. A seed fixes the initial weights and the order of the data in
every arm of a sweep, so the replicated configurations' final test accuracies are
fitted as a mean per configuration plus a shift per seed shared by all of them (a
randomized complete block design, the seed the block: Montgomery, 'Design and
Analysis of Experiments', ch. 4), as epoch times are (`time_spread.LogSpread`). Two sides
that ran seeds in common are then compared seed for seed against the spread left
(`SeedBlocks.test`); a configuration whose seeds spread unlike the others' is left
out of that pool and held to its own differences."""

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.records import counted
from orchestrator.report.answers.welch import (MIN_TEST_DOF, SIGNIFICANCE, SeedForSeedT,
                                               f_quantile, f_upper_p, paired_t, seed_for_seed,
                                               t_quantile)
from orchestrator.report.answers.wording import listed


def blocked_fit(values: list, seeds: list) -> tuple[float, int, tuple]:
    """Least squares of `values` (arrays: trials' log times, or seeds' accuracies, one a
    group of identical work) on their group and their seed (`seeds`, alike: a shift
    per seed beyond the first, shared by every group): the residual standard
    deviation, its degrees of freedom and each seed's shift; (NaN, 0, ()) where the
    values hold one seed, one has none, the fit is singular (a group whose seeds no
    other ran: their shifts cannot be told from its mean), or no degree of freedom is
    left."""
    flat, seed_of = np.concatenate(values), np.concatenate(seeds)
    known = ~np.isnan(seed_of)
    distinct = np.unique(seed_of[known])
    if len(distinct) < 2 or not known.all():
        return math.nan, 0, ()
    group_of = np.concatenate([np.full(len(group), index) for index, group in enumerate(values)])
    design = np.column_stack([group_of == index for index in range(len(values))]
                             + [seed_of == seed for seed in distinct[1:]]).astype(float)
    coefficients, _, rank, _ = np.linalg.lstsq(design, flat, rcond=None)
    if rank < design.shape[1]:  # shifts that cannot be told from a group's mean
        return math.nan, 0, ()
    residuals = flat - design @ coefficients
    dof = len(flat) - int(rank)
    squares = float((residuals ** 2).sum())
    if dof < 1 or not squares > 0:
        return math.nan, 0, ()
    shifts = tuple((float(seed), float(shift))
                   for seed, shift in zip(distinct[1:], coefficients[len(values):]))
    return math.sqrt(squares / dof), dof, shifts


@dataclass(frozen=True)
class SeedBlocks:
    """The replicated configurations' seeds that learned, fitted as a configuration's
    mean plus a shift per seed (`seed_blocks`)."""

    sd: float = math.nan
    """One seed's spread left once each seed's shift is out."""
    dof: int = 0
    """Its degrees of freedom: the seeds fitted, less one per configuration and one per
    seed beyond the first; under MIN_TEST_DOF, no seed-for-seed test (`tests`)."""
    shifts: tuple[tuple[float, float], ...] = ()
    """(seed, its accuracies' shift from the first seed's)."""
    configurations: int = 0
    seeds: int = 0
    """The configurations and the seeds (replicas) fitted."""
    shift_f: float = math.nan
    """F of the shifts: the spread they take out, per shift, over the spread left."""
    wide: tuple[tuple[str, float, int, int, int], ...] = ()
    """The configurations left out, their seeds spreading unlike the others': (what
    it is, F, its and the rest's degrees of freedom, the configurations tested,
    which Bonferroni's correction divides the level by)."""
    keys: tuple[str, ...] = ()
    """The columns that make a configuration."""
    wide_configurations: frozenset = frozenset()
    """Those left out, as their `keys`' values (`in_pool`)."""
    most_seeds: int = 0
    """The most seeds of one configuration fitted."""

    @property
    def tests(self) -> bool:
        """Whether two sides that ran seeds in common are compared seed for seed."""
        return self.dof >= MIN_TEST_DOF

    def in_pool(self, row) -> bool:
        """Whether `row` (a cell or a trial: a Series, a dict or a named tuple) is not a
        configuration left out of the pool."""
        if not self.wide_configurations:
            return True
        values = row._asdict() if hasattr(row, "_asdict") else row
        return _key(values, self.keys) not in self.wide_configurations

    def test(self, a: dict, b: dict, rows=None) -> SeedForSeedT | None:
        """Two sides' accuracies by seed ({seed: accuracy}) on the seeds both ran: where
        a side (`rows`, the two cells) is a configuration left out of the pool, on
        the pair's own differences (`welch.paired_t`, two shared seeds or more), else
        against the pool (`welch.seed_for_seed`); None where no test runs that way
        (no shared seed, no pool, one shared seed beside a configuration left out)."""
        if not self.tests:
            return None
        if rows is not None and not all(self.in_pool(row) for row in rows):
            return paired_t(a, b, self.sd)
        return seed_for_seed(a, b, self.sd, self.dof)

    def resolution(self, seeds: int) -> float:
        """The smallest gap told apart at p < SIGNIFICANCE between two sides of the same
        `seeds` seeds, against the pool; NaN without it."""
        if not self.tests:
            return math.nan
        return t_quantile(SIGNIFICANCE, self.dof) * self.sd * math.sqrt(2 / seeds)

    def sentence(self) -> str:
        """The fit, the shifts and the configurations left out, for the noise paragraph;
        where no test runs this way, why."""
        if not self.tests:
            return (" The seeds are not compared seed for seed: too few replicated "
                    "configurations share their seeds to fit a shift per seed (fewer than "
                    f"{MIN_TEST_DOF} degrees of freedom left).") if self.configurations else ""
        shifts = listed([f"seed {seed:g}'s {shift:+.3f}" for seed, shift in self.shifts])
        beyond = len(self.shifts)
        wide = "".join(
            f" The seeds of one configuration ({configuration}) spread more than the "
            f"others' allow (F = {f:.1f} on {dof} and {rest} degrees of freedom, above "
            f"{f_quantile(dof, rest, SIGNIFICANCE / tested):.2f}, the point a "
            f"{SIGNIFICANCE:.0%} test of all {tested} configurations at once sets, "
            f"Bonferroni's): it is left out of the fit, and a comparison with it is held "
            f"to its own seeds' spread."
            for configuration, f, dof, rest, tested in self.wide)
        return (f" A seed fixes the initial weights and the order of the data in every arm, "
                f"so the accuracies are also fitted as a mean per configuration plus a shift "
                f"per seed, the same for every configuration (the fit's assumption). "
                f"Fitted on {self.seeds} runs of {len(self.shifts) + 1} seeds in "
                f"{counted(self.configurations, 'configuration')}, the shifts are {shifts} "
                f"from the first seed's (the shifts' F = {self.shift_f:.1f} on {beyond} and "
                f"{self.dof} degrees of freedom, "
                f"{'above' if self.shift_f > f_quantile(beyond, self.dof) else 'below'} its "
                f"{1 - SIGNIFICANCE:.0%} point, {f_quantile(beyond, self.dof):.2f}), and the "
                f"spread left is {self.sd:.3f} ({counted(self.dof, 'degree')} of freedom)."
                f"{wide}")

    def table_row(self) -> tuple:
        """The noise table's row: what varied, sd, degrees of freedom, from, the smallest
        gap told apart."""
        return ("final test accuracy, seed for seed (each seed's shift out)",
                f"{self.sd:.3f} (not log)", self.dof,
                f"{counted(self.configurations, 'configuration')}, {self.seeds} runs",
                f"{self.resolution(self.most_seeds):.3f} between two cells of the same "
                f"{self.most_seeds} seeds")


def seed_blocks(groups: list[pd.DataFrame], keys: list[str]) -> SeedBlocks:
    """`blocked_fit` of the replicated configurations' accuracies (each group one
    configuration's seeds that learned, a row a seed: `seed`, `final_test_acc` and
    `keys`), less those whose seeds spread unlike the others' (`_wider`): a pool is a
    common spread, and one configuration three times as wide would double it for
    every comparison. Each group is tested once against all the others (a single
    pass: a second, on a pool the first made narrower, would find ever more)."""
    # A seed no other configuration ran tells nothing of the spread (its shift fits its
    # one value exactly), and a configuration whose seeds all are its own would make
    # the fit singular: a configuration that ran one stays out of the fit, unscreened.
    while True:  # until every seed left is run by two configurations left
        runs = Counter(seed for group in groups for seed in set(group["seed"]))
        placed = [group for group in groups if all(runs[seed] > 1 for seed in group["seed"])]
        if len(placed) == len(groups):
            break
        groups = placed
    if len(groups) < 2:
        return SeedBlocks(configurations=len(groups), keys=tuple(keys))
    values = [group["final_test_acc"].to_numpy(dtype=float) for group in groups]
    seeds = [group["seed"].to_numpy(dtype=float) for group in groups]
    wide = {index: (*found, len(groups)) for index in range(len(groups)) if len(groups) > 2
            for found in [_wider(index, values, seeds)] if found is not None}
    if len(groups) - len(wide) < 2:
        wide = {}  # nearly all spread apart: no common spread to keep, so none is left out
    kept = [index for index in range(len(groups)) if index not in wide]
    kept_values, kept_seeds = [values[index] for index in kept], [seeds[index] for index in kept]
    sd, dof, shifts = blocked_fit(kept_values, kept_seeds)
    shift_f = math.nan
    if dof:
        # The shifts' F: what they take out of the groups' own spread, per shift.
        within = sum(float(((group - group.mean()) ** 2).sum()) for group in kept_values)
        shift_f = (within - sd ** 2 * dof) / len(shifts) / sd ** 2
    rows = [groups[index].iloc[0] for index in wide]
    return SeedBlocks(sd, dof, shifts, len(kept), sum(len(group) for group in kept_values),
                      shift_f,
                      tuple((_configuration(row), *wide[index]) for row, index in zip(rows, wide)),
                      tuple(keys), frozenset(_key(row, keys) for row in rows),
                      max((len(group) for group in kept_values), default=0))


def _wider(index: int, values: list, seeds: list) -> tuple[float, int, int] | None:
    """Whether group `index`'s values, each seed's shift out (fitted on the other
    groups), spread beyond the others' spread left (`blocked_fit` without it): F, its
    variance over theirs, on its seeds less one and their degrees of freedom, its p
    times the number of groups (Bonferroni's correction) below SIGNIFICANCE; (F, the
    two degrees of freedom) if so, else None."""
    sd, dof, shifts = blocked_fit(values[:index] + values[index + 1:],
                                  seeds[:index] + seeds[index + 1:])
    if dof < MIN_TEST_DOF:
        return None  # no spread to hold it to
    # Every seed it ran, another ran too (`seed_blocks`): the others' fit places it,
    # the first of theirs at 0.
    shift, group, group_seeds = dict(shifts), values[index], seeds[index]
    adjusted = group - np.array([shift.get(seed, 0.0) for seed in group_seeds])
    f = float(((adjusted - adjusted.mean()) ** 2).sum()) / (len(group) - 1) / sd ** 2
    p = min(1.0, len(values) * f_upper_p(f, len(group) - 1, dof))
    return (f, len(group) - 1, dof) if p < SIGNIFICANCE else None


def _key(row, keys: tuple[str, ...]) -> tuple:
    """A configuration's `keys`' values, NaN as None (NaN equals nothing)."""
    return tuple(None if pd.isna(value) else value
                 for value in (row.get(key) for key in keys))


def _configuration(row: pd.Series) -> str:
    """A configuration in a few words: "2 workers, global batch 512, lr 0.4, a 1-epoch
    warm-up"."""
    text = (f"{counted(int(row['num_workers']), 'worker')}, global batch "
            f"{int(row['global_batch_size'])}, lr {row['lr']:g}")
    if row.get("model", "lenet") != "lenet":
        text = f"{row['model']} on {text}"
    if row.get("sync", "scratch") not in ("scratch", "no sync"):
        text += f", sync {row['sync']}"
    if row.get("warmup_epochs", 0):
        text += f", a {int(row['warmup_epochs'])}-epoch warm-up"
    if row.get("straggler_slowdown", 1) != 1:
        text += f", a worker slowed {row['straggler_slowdown']:g}x"
    return text
