"""The t tests that decide whether a difference of accuracies is a finding, and the
level it is called at: seed for seed where the two sides ran seeds in common
(`SeedForSeedT`), else Welch's on both sides' seeds, else Student's on the sweep's
pooled seed spread where a side has one; with the F, Fisher's exact and the
multiple-testing procedures the answers use beside them."""

import functools
import math
from dataclasses import dataclass

from orchestrator.report.answers.wording import seeds_label

# A difference is called at this two-sided level of its test.
SIGNIFICANCE = 0.05
# The fewest degrees of freedom a spread is tested on: with 1 or 2 Student's t at
# p < 0.05 needs t > 12.7 or 4.3, and a spread from so few replicas is itself a guess.
MIN_TEST_DOF = 3


@dataclass(frozen=True)
class Welch:
    """Welch's t test of two samples' means (unequal variances): t, its degrees of
    freedom (Welch-Satterthwaite) and the two-sided p-value; `sd`, the two samples'
    own spread, sqrt((var_a + var_b) / 2), which its power is reckoned from."""

    t: float
    dof: float
    p: float
    sd: float = math.nan

    def text(self, sizes: tuple[int, int]) -> str:
        return f"Welch's t = {self.t:.2f}, {p_text(self.p)}, {sizes[0]} and {sizes[1]} seeds"


@dataclass(frozen=True)
class PooledT:
    """Student's t test of two means against the sweep's pooled seed spread (`sd`,
    one seed's standard deviation over every replicated configuration, on `dof`
    degrees of freedom), where a side has one seed and Welch's test cannot run:
    t = gap / (sd sqrt(1/n1 + 1/n2)), which assumes every configuration's seeds
    spread alike; or against one side's own spread (`whose`), for a configuration
    that spreads unlike the sweep's pool."""

    t: float
    dof: float
    p: float
    sd: float
    whose: str = "the sweep's pooled seed spread"

    def text(self, sizes: tuple[int, int]) -> str:
        return (f"t = {self.t:.2f} on {self.whose}, sd {self.sd:.3f}, "
                f"{p_text(self.p)}, {sizes[0]} and {sizes[1]} seeds")


@dataclass(frozen=True)
class SeedForSeedT:
    """Student's t test of two sides run with the same seeds, compared seed for seed:
    a seed fixes the initial weights and the order of the data in every arm, and
    the sweep's accuracies are fitted as a configuration's mean plus a shift per seed
    (`seed_blocks.SeedBlocks`, a randomized complete block design: Montgomery,
    'Design and Analysis of Experiments', ch. 4). On that pool (`seed_for_seed`),
    `sd` is one seed's spread left once each seed's shift is out, on `dof` degrees of
    freedom, and the mean of n seeds' differences has the standard error sd
    sqrt(2 / n); on a pair's own differences (`paired_t`, `own`: a side whose seeds
    spread unlike the pool's), `sd` is the spread of its differences, on n - 1.
    `seeds`: those compared (both sides ran them), `mean` and `other_mean` each side's
    mean over them, `subset` whether a side ran seeds the other did not (left out)."""

    t: float
    dof: float
    p: float
    sd: float
    seeds: tuple[float, ...]
    mean: float
    other_mean: float
    subset: bool = False
    own: bool = False
    pool_sd: float = math.nan
    """With `own`: the sweep's pooled spread of one seed, for the sentence."""
    why: str = "a side's seeds spread unlike the pool's"
    """With `own`: why the pair's own differences, not the pool, for the sentence."""

    def text(self, sizes: tuple[int, int] = (0, 0)) -> str:
        shared = (f"{seeds_label(self.seeds)} on both sides, {self.mean:.3f} against "
                  f"{self.other_mean:.3f}; " if self.subset else "")
        which = "" if self.subset else f" on {seeds_label(self.seeds)}"
        if self.own:
            pool = (f", where the sweep's pool gives a difference "
                    f"{self.pool_sd * math.sqrt(2):.3f}" if self.pool_sd > 0 else "")
            return (f"{shared}t = {self.t:.2f} seed for seed{which}, on the pair's own "
                    f"differences, their sd {self.sd:.3f}{pool} ({self.why}), "
                    f"{p_text(self.p)}")
        assumed = " (one seed: the sweep's spread assumed)" if len(self.seeds) == 1 else ""
        return (f"{shared}t = {self.t:.2f} seed for seed{which}, sd {self.sd:.3f} once each "
                f"seed's shift is out{assumed}, {p_text(self.p)}")

    @property
    def gap(self) -> float:
        """The compared means' difference."""
        return self.mean - self.other_mean


def _shared(a: dict, b: dict) -> tuple[tuple[float, ...], float, float, bool]:
    """The seeds both sides ran, each side's mean over them, and whether a side ran
    others."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        return (), math.nan, math.nan, False
    mean, other_mean = (sum(side[seed] for seed in seeds) / len(seeds) for side in (a, b))
    return seeds, mean, other_mean, len(seeds) < max(len(a), len(b))


def seed_for_seed(a: dict, b: dict, sd: float, dof: float) -> SeedForSeedT | None:
    """`SeedForSeedT` of two sides' accuracies by seed ({seed: accuracy}) on the seeds
    both ran, against the sweep's spread `sd` left once each seed's shift is out; None
    where they share none, or no spread is known."""
    seeds, mean, other_mean, subset = _shared(a, b)
    if not seeds or not dof or not sd > 0:
        return None
    t = (mean - other_mean) / (sd * math.sqrt(2 / len(seeds)))
    return SeedForSeedT(t, dof, t_two_sided_p(t, dof), sd, seeds, mean, other_mean, subset)


def paired_t(a: dict, b: dict, pool_sd: float = math.nan,
             why: str = SeedForSeedT.why) -> SeedForSeedT | None:
    """`SeedForSeedT` of two sides' accuracies by seed on the seeds both ran, against
    the spread of their own differences (n - 1 degrees of freedom): for a side whose
    seeds spread unlike the sweep's pool (`pool_sd`, one seed's, said beside it), or
    another reason, `why`; None under two shared seeds, or where the differences do
    not spread."""
    seeds, mean, other_mean, subset = _shared(a, b)
    if len(seeds) < 2:
        return None
    differences = [a[seed] - b[seed] for seed in seeds]
    sd = math.sqrt(sum((d - (mean - other_mean)) ** 2 for d in differences) / (len(seeds) - 1))
    if not sd > 0:
        return None
    t = (mean - other_mean) / (sd / math.sqrt(len(seeds)))
    dof = len(seeds) - 1
    return SeedForSeedT(t, dof, t_two_sided_p(t, dof), sd, seeds, mean, other_mean, subset,
                        own=True, pool_sd=pool_sd, why=why)


def gap_interval(gap: float, test) -> tuple[float, float] | None:
    """The 95% (1 - SIGNIFICANCE) confidence interval of the gap `test` tested (its t
    and degrees of freedom: the standard error is gap / t); None where t is 0."""
    if not test.t:
        return None
    half = t_quantile(SIGNIFICANCE, test.dof) * abs(gap / test.t)
    return gap - half, gap + half


@functools.cache
def f_quantile(dof: float, other_dof: float, level: float = SIGNIFICANCE) -> float:
    """The f with `f_upper_p(f, dof, other_dof)` = `level`, by bisection."""
    low, high = 0.0, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if f_upper_p(middle, dof, other_dof) > level:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def f_upper_p(f: float, dof: float, other_dof: float) -> float:
    """P(F >= f) for Fisher's F with (`dof`, `other_dof`) degrees of freedom: the
    regularized incomplete beta I_x(other_dof/2, dof/2) at x = other_dof / (other_dof
    + dof f)."""
    if not f > 0:
        return 1.0
    return _incomplete_beta(other_dof / (other_dof + dof * f), other_dof / 2, dof / 2)


def pooled_t(a: list[float], b: list[float], sd: float, dof: float,
             whose: str = PooledT.whose) -> PooledT | None:
    """`PooledT` of mean(a) - mean(b); None without a value on a side, or without a
    pooled spread (no configuration ran with two seeds that learned)."""
    if not a or not b or not dof or not sd > 0:
        return None
    t = (sum(a) / len(a) - sum(b) / len(b)) / (sd * math.sqrt(1 / len(a) + 1 / len(b)))
    return PooledT(t, dof, t_two_sided_p(t, dof), sd, whose)


def welch(a: list[float], b: list[float]) -> Welch | None:
    """Welch's t test of mean(a) - mean(b); None with fewer than 2 values on a side, or
    no spread on either (then no test is possible, and the means are the figures)."""
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / (len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / (len(b) - 1)
    se_a, se_b = var_a / len(a), var_b / len(b)
    if se_a + se_b == 0:
        return None
    t = (mean_a - mean_b) / math.sqrt(se_a + se_b)
    dof = (se_a + se_b) ** 2 / (se_a ** 2 / (len(a) - 1) + se_b ** 2 / (len(b) - 1))
    return Welch(t, dof, t_two_sided_p(t, dof), math.sqrt((var_a + var_b) / 2))


# The chance a test should have of calling a real gap of the size it is asked about.
POWER = 0.8
# Beyond this many seeds a side, a gap is called too small to resolve in practice.
MOST_SEEDS = 100


def detectable_gap(sd: float, sizes: tuple[int, int], dof: float) -> float:
    """The smallest gap of two means of `sizes` seeds that a two-sided t test at
    SIGNIFICANCE calls with probability POWER, seeds spread by `sd` (known on `dof`
    degrees of freedom): (t_{1-a/2} + t_{power}) sd sqrt(1/n1 + 1/n2), the usual
    approximation (Cohen, 1988, 'Statistical Power Analysis', ch. 2)."""
    return power_factor(dof) * sd * math.sqrt(1 / sizes[0] + 1 / sizes[1])


def power_factor(dof: float) -> float:
    """How many standard errors a gap must span for a two-sided t test at SIGNIFICANCE
    to call it with probability POWER: t_{1-a/2} + t_{power} (Cohen, 1988, ch. 2)."""
    return t_quantile(SIGNIFICANCE, dof) + t_quantile(2 * (1 - POWER), dof)


def seeds_to_resolve(gap: float, sd: float, dof: float | None = None,
                     fewest: int = 2) -> int | None:
    """The fewest seeds a side, from `fewest`, whose means a t test would tell `gap`
    apart with at POWER (`detectable_gap`): on `dof` degrees of freedom (a pool's,
    kept as it is: conservative), or where None on the two sides' own, 2n - 2; None
    beyond MOST_SEEDS."""
    for seeds in range(max(fewest, 2), MOST_SEEDS + 1):
        if detectable_gap(sd, (seeds, seeds), dof or 2 * seeds - 2) <= abs(gap):
            return seeds
    return None


def fisher_exact(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Fisher's exact test, two-sided, of two counts `a` and `b`, each (successes,
    trials), say seeds that learned of seeds run: the probability, with the margins
    fixed, of a table no likelier than the one seen (Fisher, 1935)."""
    (hits_a, runs_a), (hits_b, runs_b) = a, b
    hits, runs = hits_a + hits_b, runs_a + runs_b

    def likelihood(x: int) -> float:  # hypergeometric: x of the hits in a
        return math.comb(runs_a, x) * math.comb(runs_b, hits - x) / math.comb(runs, hits)

    seen = likelihood(hits_a)
    tables = range(max(0, hits - runs_b), min(hits, runs_a) + 1)
    return min(1.0, sum(likelihood(x) for x in tables if likelihood(x) <= seen * (1 + 1e-9)))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (Holm, 1979), in their order:
    the i-th smallest times (m - i), never below an adjusted one before it, at most 1."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted, highest = [1.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        highest = max(highest, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = highest
    return adjusted


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini and Hochberg's (1995) adjusted p-values (q-values), in their order: the
    i-th smallest times m / i, never above an adjusted one after it, at most 1. Those
    below a level keep the expected share of false findings among them under it."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index], reverse=True)
    adjusted, lowest = [1.0] * len(p_values), 1.0
    for position, index in enumerate(order):
        rank = len(p_values) - position
        lowest = min(lowest, len(p_values) * p_values[index] / rank)
        adjusted[index] = lowest
    return adjusted


def p_text(p: float) -> str:
    """A p-value as the sheet prints it: "p = 0.0071", or "p < 1e-06" below that (the
    tail of a t distribution fitted on a few dozen trials says no more)."""
    return f"p = {p:.2g}" if p >= SMALLEST_P else f"p < {SMALLEST_P:g}"


SMALLEST_P = 1e-6


@functools.cache
def t_quantile(p_two_sided: float, dof: float) -> float:
    """The t > 0 with `t_two_sided_p(t, dof)` = `p_two_sided`, by bisection; kept, as
    `seeds_to_resolve` asks the same few quantiles for every seed count it tries."""
    low, high = 0.0, 1e4
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, dof) > p_two_sided:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def t_two_sided_p(t: float, dof: float) -> float:
    """P(|T| >= |t|) for Student's t with `dof` degrees of freedom: the regularized
    incomplete beta I_x(dof/2, 1/2) at x = dof / (dof + t^2)."""
    return _incomplete_beta(dof / (dof + t * t), dof / 2, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (Lentz's method; Press et al., Numerical Recipes, 6.4)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1 - x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _incomplete_beta(1 - x, b, a)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction / a
