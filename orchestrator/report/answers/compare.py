"""Comparisons that respect the noise: two epoch times, two accuracies, two
cells' accuracies, each put as a phrase to be followed by the other's name; a
difference within the noise is said to be so."""

import pandas as pd

from orchestrator.report.answers.noise import UNTESTED_SYNC, LogSpread, Noise
from orchestrator.report.answers.welch import SIGNIFICANCE, PooledT, Welch
from orchestrator.report.answers.wording import percent


def compare_times(time_s: float, other_s: float, noise: Noise, single_epoch: bool = False,
                  spread: LogSpread | None = None) -> str:
    """How `time_s` stands to `other_s`, to be followed by the other's name: "1.87x
    faster (t = -5.10, p = 1.2e-05) than", or "not significantly different (2% apart;
    t = ..., p = ...) from", told apart by Student's t on their logs against `spread`
    (the sweep's epoch-time spread unless given, `LogSpread.test`); where the sweep
    measured no spread, by the range: "1.87x faster than" or "within noise (2% apart,
    noise 3%) of". `single_epoch`: a side was timed over one epoch (`one_epoch`)."""
    test = (spread or noise.time_spread).test(time_s, other_s, single_epoch)
    if test is None:
        if within_noise(time_s, other_s, noise, single_epoch):
            return (f"within noise ({percent(_apart(time_s, other_s))} apart, noise "
                    f"{noise.time_label(single_epoch)}) of")
        figures = ""
    else:
        figures = f" (t = {test[0]:.2f}, p = {test[1]:.2g})"
        if not test[1] < SIGNIFICANCE:
            return (f"not significantly different ({percent(_apart(time_s, other_s))} apart"
                    f"; {figures[2:-1]}) from")
    if time_s < other_s:
        return f"{other_s / time_s:.2f}x faster{figures} than"
    return f"{time_s / other_s:.2f}x slower{figures} than"


def times_differ(time_s: float, other_s: float, noise: Noise,
                 single_epoch: bool = False) -> int:
    """What `compare_times` says, as a sign: -1 where `time_s` is the shorter beyond the
    noise (significantly, where the sweep has a test), 1 the longer, 0 not told apart."""
    test = noise.time_spread.test(time_s, other_s, single_epoch)
    apart = (test[1] < SIGNIFICANCE if test is not None
             else not within_noise(time_s, other_s, noise, single_epoch))
    return (-1 if time_s < other_s else 1) if apart else 0


def within_noise(time_s: float, other_s: float, noise: Noise,
                 single_epoch: bool = False) -> bool:
    """Whether two epoch times are within the range noise (`Noise.time_for`), the rule
    where the sweep has no test of times."""
    return _apart(time_s, other_s) <= noise.time_for(single_epoch)


def _apart(time_s: float, other_s: float) -> float:
    return max(time_s, other_s) / min(time_s, other_s) - 1


def compare_sync(sync_s: float, other_s: float, noise: Noise,
                 single_epoch: bool = False) -> str:
    """As `compare_times`, for two epochs' seconds in gradient sync, told apart by
    `Noise.sync_test`: "2.5x as long (t = 3.17 on their logs, p = 0.0019) as", "55%
    shorter (...) than", "not significantly different (149% apart; t = ..., p = ...)
    from"; where the sweep measured no sync spread, the ratio and that it was not tested."""
    test = noise.sync_test(sync_s, other_s, single_epoch)
    if test is None:
        figures = f" (not tested: {UNTESTED_SYNC})"
    else:
        figures = f"t = {test[0]:.2f} on their logs, p = {test[1]:.2g}"
        if not test[1] < SIGNIFICANCE:
            return (f"not significantly different ({percent(_apart(sync_s, other_s))} apart; "
                    f"{figures}) from")
        figures = f" ({figures})"
    if sync_s >= other_s:
        return f"{sync_s / other_s:.2g}x as long{figures} as"
    return f"{percent(1 - sync_s / other_s)} shorter{figures} than"


def syncs_not_told_apart(sync_s: float, other_s: float, noise: Noise,
                         single_epoch: bool = False) -> bool:
    """Whether `Noise.sync_test` ran and did not tell two sync times apart."""
    test = noise.sync_test(sync_s, other_s, single_epoch)
    return test is not None and not test[1] < SIGNIFICANCE


def one_epoch(*rows) -> bool:
    """Whether any of these trials or cells was timed over a single epoch (its
    `timed_epoch_count`, which `noise.prepared` adds; unknown counts as several)."""
    return any(row is not None and row.get("timed_epoch_count", 2) == 1 for row in rows)


def compare_acc(acc: float, other_acc: float, noise: Noise,
                test: Welch | PooledT | None = None, sizes: tuple[int, int] = (0, 0)) -> str:
    """As `compare_times`, for test accuracies: "0.031 higher than" or "within noise (...)
    of"; with `test` (`Noise.seed_test` of the two sides' `sizes` seeds) decided by it,
    not by the sweep's noise (the largest range of any one configuration's seeds, which
    would call a gap the seeds resolve noise)."""
    gap = acc - other_acc
    figures = f" ({test.text(sizes)})" if test is not None else ""
    if told_apart(gap, noise, test):
        return f"{abs(gap):.3f} {'higher' if gap > 0 else 'lower'}{figures} than"
    if test is not None:
        return f"not significantly different ({abs(gap):.3f} apart; {test.text(sizes)}) from"
    return f"within noise ({abs(gap):.3f} apart, noise {noise.acc_label()}) of"


def told_apart(gap: float, noise: Noise, test: Welch | PooledT | None = None) -> bool:
    """Whether an accuracy gap is a finding: by `test` at p < SIGNIFICANCE where there
    is one, else beyond the sweep's accuracy noise."""
    return test.p < SIGNIFICANCE if test is not None else abs(gap) > noise.acc


def compare_cells(cell_row: pd.Series, other: pd.Series, noise: Noise) -> str:
    """`compare_acc` of two cells' final test accuracies where every seed learned (a
    seed that did not learn is a failure the sentence names, not a spread), by
    `Noise.seed_test` on their seeds (`cell`'s `seed_accs`): Welch's t where both
    have two or more, Student's t on the sweep's pooled seed spread where one has
    one; else by the sweep's noise."""
    test, sizes = _cells_test(cell_row, other, noise)
    return compare_acc(cell_row["final_test_acc"], other["final_test_acc"], noise, test, sizes)


def cells_differ(cell_row: pd.Series, other: pd.Series, noise: Noise) -> int:
    """What `compare_cells` says, as a sign: 1 where `cell_row`'s accuracy is the
    higher beyond the noise (or significantly), -1 the lower, 0 not told apart."""
    test, _ = _cells_test(cell_row, other, noise)
    gap = cell_row["final_test_acc"] - other["final_test_acc"]
    return (1 if gap > 0 else -1) if told_apart(gap, noise, test) else 0


def _cells_test(cell_row: pd.Series, other: pd.Series, noise: Noise
                ) -> tuple[Welch | PooledT | None, tuple[int, int]]:
    seeds = [list(row.get("seed_accs", ()) or ()) for row in (cell_row, other)]
    failed = any(int(row.get("not_learned", 0) or 0) for row in (cell_row, other))
    return (None if failed else noise.seed_test(*seeds)), (len(seeds[0]), len(seeds[1]))
