"""Comparisons that respect the noise: two epoch times, two accuracies, two
cells' accuracies, each put as a phrase to be followed by the other's name; a
difference within the noise is said to be so."""

import math

import pandas as pd

from orchestrator.report.answers.noise import UNTESTED_SYNC, Noise
from orchestrator.report.answers.sides import Side, Sides, any_single
from orchestrator.report.answers.time_spread import LogSpread, TimeTest
from orchestrator.report.answers.welch import (SIGNIFICANCE, PooledT, SeedForSeedT, Welch, holm,
                                               p_text)
from orchestrator.report.answers.wording import percent, seeds_label


def compare_times(time_s: float, other_s: float, noise: Noise, sides: Sides | bool = False,
                  spread: LogSpread | None = None, family: list[float] | None = None) -> str:
    """How `time_s` stands to `other_s`, to be followed by the other's name: "1.87x
    faster (t = -5.10, p = 1.2e-05) than", or "not significantly different (2% apart;
    t = ..., p = ...) from", told apart by Student's t on their logs against `spread`
    (the sweep's epoch-time spread unless given, `LogSpread.test`); where the sweep
    measured no spread, by the range: "1.87x faster than" or "within noise (2% apart,
    noise 3%) of". `sides`: the two sides (`sides.sides_of` two rows: each one's seeds and
    whether it was timed over one epoch), or a bool for two 1-trial sides. `family`: the
    p-values of every comparison made beside this one (its own among them), which
    decide by Holm's adjustment of them (`family_p`)."""
    test = (spread or noise.time_spread).test(time_s, other_s, sides)
    if test is None:
        if within_noise(time_s, other_s, noise, sides):
            return (f"within noise ({percent(_apart(time_s, other_s))} apart, noise "
                    f"{noise.time_label(any_single(sides))}) of")
        figures = ""
    else:
        figures, p = f"t = {test.t:.2f}, {p_text(test.p)}", family_p(test.p, family)
        if family and len(family) > 1:
            figures += f"; Holm over {len(family)} comparisons, {p_text(p)}"
        if test.subset:  # compared on the seeds both sides ran: say which, and their times
            time_s, other_s = test.time_s, test.other_s
            figures = _on_shared_seeds(test, figures, ".3g")
        if not p < SIGNIFICANCE:
            return (f"not significantly different ({percent(_apart(time_s, other_s))} apart"
                    f"; {figures}) from")
        figures = f" ({figures})"
    if time_s < other_s:
        return f"{other_s / time_s:.2f}x faster{figures} than"
    return f"{time_s / other_s:.2f}x slower{figures} than"


def _on_shared_seeds(test: TimeTest, figures: str, spec: str) -> str:
    """A test's `figures` after the seeds both sides ran and their times there, each
    formatted by `spec`: "seed 0 on both sides, 8.84 s against 8.76 s; t = ..."."""
    return (f"{seeds_label(test.seeds)} on both sides, {test.time_s:{spec}} s against "
            f"{test.other_s:{spec}} s; {figures}")


def family_p(p: float, family: list[float] | None) -> float:
    """`p` adjusted by Holm's method within `family` (which holds it); `p` alone."""
    if not family or len(family) < 2:
        return p
    # Its own p, computed alike for either order of the pair (`LogSpread.test`); were it
    # missing, the family with it added (a larger family: the conservative side).
    index = next((i for i, other in enumerate(family) if math.isclose(other, p)), None)
    return holm(family)[index] if index is not None else holm([*family, p])[-1]


def times_differ(time_s: float, other_s: float, noise: Noise,
                 sides: Sides | bool = False, family: list[float] | None = None) -> int:
    """What `compare_times` says, as a sign: -1 where `time_s` is the shorter beyond the
    noise (significantly, where the sweep has a test), 1 the longer, 0 not told apart."""
    test = noise.time_spread.test(time_s, other_s, sides)
    if test is None:
        return (-1 if time_s < other_s else 1) if not within_noise(time_s, other_s, noise,
                                                                      sides) else 0
    # The times the test compared (seed for seed, where the sides share seeds).
    shorter = test.time_s < test.other_s
    return (-1 if shorter else 1) if family_p(test.p, family) < SIGNIFICANCE else 0


def weak(p: float | None) -> str:
    """"weak: p = 0.034" for a verdict's p-value below SIGNIFICANCE, where an answer's
    first paragraph states the verdict; else empty. A candidate mark: the sheet keeps
    it, as "tentative", only where the Benjamini-Hochberg procedure over all the
    sheet's p-values does not keep the finding (`sheet.resolve_marks`)."""
    return f"weak: {p_text(p)}" if p is not None and p < SIGNIFICANCE else ""


def ratio_text(time_s: float, other_s: float, noise: Noise, sides: Sides | bool = False,
               family: list[float] | None = None) -> str:
    """`compare_times` in three words, to be followed by the other's name: "1.38x
    shorter than", "not told apart from" or "1.10x longer than"; the ratio of the times
    the test compared (seed for seed, where the sides share seeds, which it names), as
    it prints, and a weak p-value marked (`weak`)."""
    sign = times_differ(time_s, other_s, noise, sides, family)
    test = noise.time_spread.test(time_s, other_s, sides)
    notes = []
    if test is not None and test.subset:
        time_s, other_s = test.time_s, test.other_s
        notes.append(seeds_label(test.seeds))
    if test is not None:
        notes.append(weak(family_p(test.p, family)))
    notes = "; ".join(note for note in notes if note)
    notes = f" ({notes})" if notes else ""
    if sign < 0:
        return f"{other_s / time_s:.2f}x shorter{notes} than"
    return f"{time_s / other_s:.2f}x longer{notes} than" if sign > 0 else "not told apart from"


def cells_gap(cell_row: pd.Series, other: pd.Series, noise: Noise) -> float:
    """`cell_row`'s final test accuracy less `other`'s, as `compare_cells` prints it: of
    the seeds both ran where its test compared those only (`acc_gap`)."""
    test, _ = _cells_test(cell_row, other, noise)
    return acc_gap(cell_row["final_test_acc"], other["final_test_acc"], test)


def cells_seeds(cell_row: pd.Series, other: pd.Series, noise: Noise
                ) -> tuple[tuple[float, ...], bool]:
    """The seeds `compare_cells` compared seed for seed (() where it did not), and
    whether they are fewer than a side ran."""
    test, _ = _cells_test(cell_row, other, noise)
    if isinstance(test, SeedForSeedT):
        return test.seeds, test.subset
    return (), False


def accuracy_figures(cell_row: pd.Series, other: pd.Series, noise: Noise) -> str:
    """The two accuracies a first paragraph prints beside `accuracy_verdict`: "0.810
    against 0.829", or where the test compared the seeds both ran, fewer than a side's,
    "seed 0: 0.779 against 0.800" (the cells' means could order the two the other
    way)."""
    test, _ = _cells_test(cell_row, other, noise)
    if isinstance(test, SeedForSeedT) and test.subset:
        return f"{seeds_label(test.seeds)}: {test.mean:.3f} against {test.other_mean:.3f}"
    return f"{cell_row['final_test_acc']:.3f} against {other['final_test_acc']:.3f}"


def seed_accuracies(row) -> dict[float, float]:
    """A cell's (or trial's) final test accuracy by seed, {seed: accuracy}, as
    `Noise.seed_test` takes a side (`cell`'s `by_seed`); `row` a Series, a dict or a
    named tuple."""
    values = row._asdict() if hasattr(row, "_asdict") else row
    return dict(Side.of(values, "final_test_acc").by_seed)


def gap_on(cell_row: pd.Series, other: pd.Series, seeds: tuple[float, ...]) -> float | None:
    """`cell_row`'s final test accuracy less `other`'s on `seeds` (the mean of each
    seed's difference), or of the means where `seeds` is empty; None where a side did
    not run one of them."""
    if not seeds:
        return cell_row["final_test_acc"] - other["final_test_acc"]
    sides = [seed_accuracies(row) for row in (cell_row, other)]
    if not all(seed in side for side in sides for seed in seeds):
        return None
    return sum(sides[0][seed] - sides[1][seed] for seed in seeds) / len(seeds)


def cells_p(cell_row: pd.Series, other: pd.Series, noise: Noise) -> float | None:
    """The p-value `cells_differ` decides by; None where no test decides it."""
    test, _ = _cells_test(cell_row, other, noise)
    return test.p if test is not None else None


def accuracy_verdict(cell_row: pd.Series, other: pd.Series, noise: Noise) -> tuple[str, str]:
    """`cells_differ` in words for a first paragraph, to be followed by the other's name
    ("lower than", "not told apart from", "higher than"), and its p's mark (`weak`)."""
    verdict = {-1: "lower than", 0: "not told apart from", 1: "higher than"}[
        cells_differ(cell_row, other, noise)]
    return verdict, weak(cells_p(cell_row, other, noise))


def within_noise(time_s: float, other_s: float, noise: Noise,
                 sides: Sides | bool = False) -> bool:
    """Whether two epoch times are within the range noise (`Noise.time_for`), the rule
    where the sweep has no test of times."""
    return _apart(time_s, other_s) <= noise.time_for(any_single(sides))


def _apart(time_s: float, other_s: float) -> float:
    return max(time_s, other_s) / min(time_s, other_s) - 1


def compare_sync(sync_s: float, other_s: float, noise: Noise,
                 sides: Sides | bool = False) -> str:
    """As `compare_times`, for two epochs' seconds in gradient sync, told apart by
    `Noise.sync_test`: "2.5x as long (t = 3.17 on their logs, p = 0.0019) as", "55%
    shorter (...) than", "not significantly different (149% apart; t = ..., p = ...)
    from"; where the sweep measured no sync spread, the ratio and that it was not tested."""
    test = noise.sync_test(sync_s, other_s, sides)
    if test is None:
        figures = f" (not tested: {UNTESTED_SYNC})"
    else:
        figures = f"t = {test.t:.2f} on their logs, {p_text(test.p)}"
        if test.subset:
            sync_s, other_s = test.time_s, test.other_s
            figures = _on_shared_seeds(test, figures, ".2g")
        if not test.p < SIGNIFICANCE:
            return (f"not significantly different ({percent(_apart(sync_s, other_s))} apart; "
                    f"{figures}) from")
        figures = f" ({figures})"
    if sync_s >= other_s:
        return f"{sync_s / other_s:.2g}x as long{figures} as"
    return f"{percent(1 - sync_s / other_s)} shorter{figures} than"


def syncs_not_told_apart(sync_s: float, other_s: float, noise: Noise,
                         sides: Sides | bool = False) -> bool:
    """Whether `Noise.sync_test` ran and did not tell two sync times apart."""
    test = noise.sync_test(sync_s, other_s, sides)
    return test is not None and not test.p < SIGNIFICANCE


# What `Noise.seed_test` returns: the test two accuracies' seeds were told apart by.
AccuracyTest = SeedForSeedT | Welch | PooledT


def compare_acc(acc: float, other_acc: float, noise: Noise,
                test: AccuracyTest | None = None, sizes: tuple[int, int] = (0, 0)) -> str:
    """As `compare_times`, for test accuracies: "0.031 higher than" or "within noise (...)
    of"; with `test` (`Noise.seed_test` of the two sides' `sizes` seeds) decided by it,
    not by the sweep's noise (the largest range of any one configuration's seeds, which
    would call a gap the seeds resolve noise). The gap is the test's: where it compared
    the seeds both sides ran, fewer than a side's, of the means over those (its text
    gives them)."""
    gap = acc_gap(acc, other_acc, test)
    figures = f" ({test.text(sizes)})" if test is not None else ""
    if told_apart(gap, noise, test):
        return f"{abs(gap):.3f} {'higher' if gap > 0 else 'lower'}{figures} than"
    if test is not None:
        return f"not significantly different ({abs(gap):.3f} apart; {test.text(sizes)}) from"
    return f"within noise ({abs(gap):.3f} apart, noise {noise.acc_label()}) of"


def acc_gap(acc: float, other_acc: float, test: AccuracyTest | None) -> float:
    """`acc` less `other_acc`; where `test` compared the seeds both sides ran, fewer
    than a side's, its means' gap."""
    if isinstance(test, SeedForSeedT) and test.subset:
        return test.gap
    return acc - other_acc


def told_apart(gap: float, noise: Noise, test: AccuracyTest | None = None) -> bool:
    """Whether an accuracy gap is a finding: by `test` at p < SIGNIFICANCE where there
    is one, else beyond the sweep's accuracy noise."""
    return test.p < SIGNIFICANCE if test is not None else abs(gap) > noise.acc


def compare_cells(cell_row: pd.Series, other: pd.Series, noise: Noise) -> str:
    """`compare_acc` of two cells' final test accuracies where every seed learned (a
    seed that did not learn is a failure the sentence names, not a spread), by
    `Noise.seed_test` on their seeds (`cell`'s `by_seed`): seed for seed where they
    share seeds, else Welch's t where both have two or more, Student's t on the
    sweep's pooled seed spread where one has one; else by the sweep's noise."""
    test, sizes = _cells_test(cell_row, other, noise)
    return compare_acc(cell_row["final_test_acc"], other["final_test_acc"], noise, test, sizes)


def cells_differ(cell_row: pd.Series, other: pd.Series, noise: Noise) -> int:
    """What `compare_cells` says, as a sign: 1 where `cell_row`'s accuracy is the
    higher beyond the noise (or significantly), -1 the lower, 0 not told apart."""
    test, _ = _cells_test(cell_row, other, noise)
    gap = acc_gap(cell_row["final_test_acc"], other["final_test_acc"], test)
    return (1 if gap > 0 else -1) if told_apart(gap, noise, test) else 0


def _cells_test(cell_row: pd.Series, other: pd.Series, noise: Noise
                ) -> tuple[AccuracyTest | None, tuple[int, int]]:
    seeds = [seed_accuracies(row) for row in (cell_row, other)]
    failed = any(int(row.get("not_learned", 0) or 0) for row in (cell_row, other))
    return ((None if failed else noise.seed_test(*seeds, rows=(cell_row, other))),
            (len(seeds[0]), len(seeds[1])))
