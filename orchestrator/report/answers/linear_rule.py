"""The linear scaling rule tested on 13.5.2's lr search (Goyal et al., 2017): the
pairs of 1 worker's lr and k workers' k-fold lr, each pair's verdict and how it
reads, and what 13.5.2 found of the rule for 13.6.1 to cite."""

import math

import numpy as np
import pandas as pd

from orchestrator.records import counted
from orchestrator.report.answers.cells import cells, none_learned
from orchestrator.report.answers.compare import acc_gap, seed_accuracies, told_apart
from orchestrator.report.answers.learning_rates import lr_trials
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.welch import (MOST_SEEDS, POWER, SIGNIFICANCE, SeedForSeedT,
                                               Welch, detectable_gap, fisher_exact,
                                               gap_interval, seeds_to_resolve)
from orchestrator.report.answers.wording import listed


def linear_rule(summary: pd.DataFrame, noise: Noise) -> pd.DataFrame:
    """The linear scaling rule tested (Goyal et al., 2017): k times the batch at k
    times the lr should reach 1 worker's accuracy in as many epochs. One row per
    1-worker lr whose k-fold was also searched at k workers, with the verdict; each
    accuracy the mean over its seeds."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    means = cells(trials, ["num_workers", "global_batch_size", "lr"])
    if means.empty:
        return pd.DataFrame()
    single = means[means["num_workers"] == 1]
    rows = []
    for one in single.sort_values("lr").itertuples():
        for many in means[means["num_workers"] > 1].sort_values("num_workers").itertuples():
            if not np.isclose(many.lr, many.num_workers * one.lr):
                continue
            gap = many.final_test_acc - one.final_test_acc
            held = rule_verdict(gap, None, noise, one._asdict(), many._asdict())
            # A failure to learn is the verdict; a t test on chance accuracies says nothing.
            # A t test on seeds some of which did not learn says nothing either.
            test = (None if held in DECIDED_BY_FAILURE or one.not_learned or many.not_learned
                    else noise.seed_test(seed_accuracies(many), seed_accuracies(one),
                                         rows=(many, one)))
            # The gap the test compared (the seeds both ran, where fewer than a side's).
            gap = acc_gap(many.final_test_acc, one.final_test_acc, test)
            rows.append({"num_workers": many.num_workers,
                         "global_batch_size": many.global_batch_size,
                         "lr_1_worker": one.lr, "acc_1_worker": one.final_test_acc,
                         "seeds_1_worker": one.seeds, "scaled_lr": many.lr,
                         "acc_scaled": many.final_test_acc, "seeds_scaled": many.seeds,
                         "t": test.t if test else np.nan,
                         "p": test.p if test else np.nan,
                         # Which t: seed for seed on the seeds both ran, Welch's on
                         # both sides' seeds, or on the pooled spread.
                         "t_test": ("" if test is None else
                                    "seed for seed" if isinstance(test, SeedForSeedT) else
                                    "Welch" if isinstance(test, Welch) else "pooled"),
                         "test": test,
                         "held": (held if held in DECIDED_BY_FAILURE
                                  else settled(rule_verdict(gap, test, noise), gap, test,
                                               noise)),
                         # Named in the sentences, not the table's columns.
                         "not_learned_1_worker": one.not_learned,
                         "not_learned_scaled": many.not_learned})
    return pd.DataFrame(rows)


# linear_rule's columns that the sentences read and the table leaves out.
RULE_TEXT_ONLY = ["not_learned_1_worker", "not_learned_scaled", "test"]


VERDICTS = {"yes": "held", "no": "did not hold",
            "within noise": "was not refuted (lower, but not beyond the noise)",
            "unsettled": "was not settled (lower by as much as the sweep's pool of seeds "
                         "calls, but not significantly against the pair's own, wider spread)",
            "failed": "failed in every seed (none learned there, where 1 worker's did)",
            "some failed": "failed in some seeds (they did not learn, where 1 worker's all "
                           "did)",
            "inconclusive": "was not tested (1 worker did not learn at that lr: no accuracy "
                            "to hold the rule to)"}


def verdict_text(held: str, decided_by_test: bool, resolution: str = "") -> str:
    """VERDICTS[held], for "did not hold" by a t test with `resolution` (`rule_figures`:
    the drop's interval) beside it; a lower accuracy that a t test did not call is "not
    significantly" lower, which may still be beyond the single-trial noise, followed by
    `resolution` (`resolution_text`: what these seeds could have told apart); a failure
    to learn, followed by its counts (`failure_text`)."""
    if held == "no" and decided_by_test and resolution:
        return f"{VERDICTS[held]} ({resolution.removeprefix('; ')})"
    if held == "within noise" and decided_by_test:
        return (f"was not refuted (lower, but not significantly at p < {SIGNIFICANCE:g}"
                f"{resolution})")
    if held == "unsettled" and resolution:
        return f"was not settled{resolution}"
    if held in FAILED and resolution:
        return VERDICTS[held].removesuffix(")") + resolution + ")"
    return VERDICTS[held]


def learned_of(seeds, not_learned) -> tuple[int, int]:
    """(seeds that learned, seeds run), from a cell's `seeds` and `not_learned`."""
    return int(seeds) - int(not_learned), int(seeds)


def failure_text(learned: tuple[int, int], one_learned: tuple[int, int]) -> str:
    """For a pair decided by seeds that did not learn: the two counts, (seeds that
    learned, seeds run) at k workers and at 1, and Fisher's exact test of them (three
    seeds a side can show a failure, not pin down how often it happens)."""
    p = fisher_exact(learned, one_learned)
    return (f"; {learned[0]} of {counted(learned[1], 'seed')} learned against {one_learned[0]} of "
            f"{one_learned[1]}, Fisher's exact p = {p:.2g}"
            + ("" if p < SIGNIFICANCE else ": how often it fails, these seeds do not settle"))


def rule_figures(held: str, gap: float, sizes: tuple[int, int], noise: Noise, test=None) -> str:
    """What a verdict's parenthesis adds (`verdict_text`): for "did not hold" by a t
    test, the drop's 95% interval (three seeds call a drop, not pin down its size);
    for a drop not called, what these seeds could tell apart (`resolution_text`)."""
    if held == "no" and test is not None:
        interval = gap_interval(gap, test)
        return ("" if interval is None else f"; a drop of {-interval[1]:.3f} to "
                f"{-interval[0]:.3f}, its {1 - SIGNIFICANCE:.0%} interval")
    if held == "unsettled":  # held to its own differences (`settled`)
        seeds = len(test.seeds)
        smallest = detectable_gap(test.sd / math.sqrt(2), (seeds, seeds), test.dof)
        return (f": its drop, {abs(gap):.3f}, is one the sweep's pool calls "
                f"({noise.acc_blocks.resolution(seeds):.3f} or more between "
                f"{counted(seeds, 'seed')} a side), but this pair's own differences (sd "
                f"{test.sd:.3f}, {counted(test.dof, 'degree')} of freedom) tell apart only drops "
                f"of {smallest:.3f} or more at {POWER:.0%} power")
    return resolution_text(gap, sizes, noise, test)


def settled(held: str, gap: float, test, noise: Noise) -> str:
    """`held`, or "unsettled" where a drop "within noise" was held to the pair's own
    differences (`test.own`: a side is a configuration the pool leaves out, its seeds
    spreading unlike the others', `SeedBlocks.test`) and is as large as the pool would
    call: not refuted only for want of those seeds' power, which says nothing of the
    rule. Any other test tests the pair as the pool would: as it reads."""
    if held != "within noise" or not isinstance(test, SeedForSeedT) or not test.own:
        return held
    return ("unsettled" if abs(gap) >= noise.acc_blocks.resolution(len(test.seeds))
            else held)


def resolution_text(gap: float, sizes: tuple[int, int], noise: Noise, test=None) -> str:
    """For a drop a t test did not call: the smallest drop seeds of `sizes` would
    call at POWER, and the seeds a side that would call this one (`seeds_needed`: a
    test with three seeds a side calls only large drops, and "not refuted" says
    nothing of smaller ones); empty where no spread is known."""
    if isinstance(test, SeedForSeedT):  # the seeds compared, each run on both sides
        sizes = (len(test.seeds), len(test.seeds))
        if test.own:  # its differences' spread, on their n - 1 degrees of freedom
            smallest = detectable_gap(test.sd / math.sqrt(2), sizes, test.dof)
            return (f"; at {POWER:.0%} power these seeds tell apart only a drop of "
                    f"{smallest:.3f} or more on the pair's own differences (their sd "
                    f"{test.sd:.3f}, {counted(test.dof, 'degree')} of freedom)")
    needed = seeds_needed(gap, sizes, noise, test)
    if needed is None:
        return ""
    seeds, sd, dof, whose = needed
    smallest = detectable_gap(sd, sizes, dof)
    return (f"; at {POWER:.0%} power these seeds tell apart only a drop of {smallest:.3f} or "
            f"more on {whose}, sd {sd:.3f}, and "
            + (f"about {seeds} seeds a side would tell this {abs(gap):.3f} apart"
               if seeds else f"no practical number of seeds (over {MOST_SEEDS} a side) "
               f"would tell this {abs(gap):.3f} apart"))


def seeds_needed(gap: float, sizes: tuple[int, int], noise: Noise, test=None):
    """(seeds a side that would tell `gap` apart at POWER, more than `sizes` have, or
    None beyond MOST_SEEDS; the sd, degrees of freedom and whose spread they are
    reckoned on), for the test that ran: seed for seed on the sweep's spread left once
    each seed's shift is out (n seeds run on both sides), Welch's on the two sides'
    own spread (its degrees of freedom now, 2n - 2 with n seeds a side), Student's on
    the sweep's pooled seed spread; None where neither spread is known, or the pair was
    tested on its own seed-for-seed differences (they spread unlike the sweep's: no
    spread to reckon more seeds on)."""
    if isinstance(test, SeedForSeedT):
        if test.own:
            return None
        return (seeds_to_resolve(gap, test.sd, test.dof, fewest=max(sizes) + 1), test.sd,
                test.dof, "the sweep's seed-for-seed spread")
    if isinstance(test, Welch) and test.sd > 0:
        return (seeds_to_resolve(gap, test.sd, fewest=max(sizes) + 1), test.sd, test.dof,
                "the two sides' own seed spread")
    if noise.acc_dof:
        return (seeds_to_resolve(gap, noise.acc_sd, noise.acc_dof, fewest=max(sizes) + 1),
                noise.acc_sd, noise.acc_dof, "the sweep's pooled seed spread")
    return None


def rule_verdict(gap: float, test, noise: Noise, one: pd.Series | None = None,
                  many: pd.Series | None = None) -> str:
    """Did k times the batch at k times the lr reach 1 worker's accuracy? Where no
    seed of 1 worker's cell (`one`) learned, there is nothing to reach: "inconclusive";
    where none of the k workers' (`many`) did, and 1 worker's did, "failed". Else,
    with a t test on the seeds (`Noise.seed_test`), it decides ("no": lower at p <
    SIGNIFICANCE; "within noise": lower, not significantly); without one, the sweep's
    accuracy noise does ("no": lower by more than it)."""
    if one is not None and none_learned(one):
        return "inconclusive"
    if many is not None and none_learned(many):
        return "failed"
    if many is not None and int(many["not_learned"]):
        return "some failed"  # a seed that diverged is the rule failing there, not a spread
    if gap >= 0:
        return "yes"
    return "no" if told_apart(gap, noise, test) else "within noise"


# How each verdict reads in a summary of the pairs, in this order.
OUTCOMES = {"yes": "held", "within noise": "was not refuted", "unsettled": "was not settled",
            "no": "did not hold",
             "some failed": "failed in some seeds",
             "failed": "failed in every seed (no seed learned)", "inconclusive": "was not tested"}
# The verdicts no t test can change: a failure to learn decides them.
DECIDED_BY_FAILURE = ("failed", "some failed", "inconclusive")
# Those where k workers' seeds did not learn: the counts are the finding.
FAILED = ("failed", "some failed")


def rule_outcome(rule: pd.DataFrame) -> str:
    """What 13.5.2 found of the linear scaling rule, pair by pair, for another answer
    to cite: "at global batch 512 it was not refuted at lr 0.2, 0.4 and did not hold
    at lr 0.8 (each the k workers' lr)"."""
    if rule.empty:
        return ("13.5.2 did not test the linear scaling rule (no lr searched at k workers "
                "was k times one searched at 1)")
    return (f"13.5.2 tested the linear scaling rule in {counted(len(rule), 'pair')}, each at the k "
            f"workers' lr: {rule_found(rule)}")


def rule_found(rule: pd.DataFrame) -> str:
    """`rule_outcome`'s verdicts alone: "at global batch 512 it was not refuted at lr
    0.2, 0.4 and did not hold at lr 0.8"."""
    parts = []
    for batch, rows in rule.groupby("global_batch_size", sort=True):
        found, last = [], ""
        for held, outcome in OUTCOMES.items():
            lrs = rows[rows["held"] == held]["scaled_lr"]
            if lrs.empty:
                continue
            verb, _, note = outcome.partition(" (")
            at = f"at lr {', '.join(f'{lr:g}' for lr in lrs)}" + (f" ({note}" if note else "")
            # "did not hold at lr 0.4, nor at lr 0.2"; a pair where every seed failed to
            # learn says so, not "did not hold": its counts are no p < 0.05 (a grading)
            found.append(f"nor {at}" if verb == last == "did not hold" else f"{verb} {at}")
            last = verb
        parts.append(f"at global batch {batch} it {listed(found).replace(' and nor ', ', nor ')}")
    return "; ".join(parts)
