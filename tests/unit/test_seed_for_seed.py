"""Accuracies compared seed for seed, as epoch times are (a 10th review: a seed fixes
the initial weights and the order of the data in every arm, so two arms run with the
same seeds share each seed's luck, and Welch's test, which takes them as
independent, spends that away). The sweep's accuracies are fitted as a mean per
configuration plus a shift per seed; two sides that share seeds are tested on the
mean of their seeds' differences against the spread left, a pair whose own
differences spread beyond it against its own, and a configuration whose seeds
spread unlike the others' is left out of the pool."""

import math
import statistics

import numpy as np
import pandas as pd
import pytest

from orchestrator.report.answers.cells import cell
from orchestrator.report.answers.compare import cells_differ, cells_gap, compare_cells
from orchestrator.report.answers.linear_rule import resolution_text
from orchestrator.report.answers.noise import Noise, estimate_noise
from orchestrator.report.answers.welch import (PooledT, SeedForSeedT, Welch, f_quantile,
                                               f_upper_p, seed_for_seed, t_two_sided_p)


@pytest.mark.parametrize("dof, other_dof, f", [
    (2, 15, 3.682),   # F tables: the 95% points
    (1, 10, 4.965),
    (4, 20, 2.866),
    (2, 13, 3.806),
])
def test_f_upper_tails_match_fishers_tables(dof, other_dof, f):
    assert f_upper_p(f, dof, other_dof) == pytest.approx(0.05, rel=2e-3)
    assert f_quantile(dof, other_dof) == pytest.approx(f, rel=1e-3)
    assert f_upper_p(0.0, dof, other_dof) == 1.0


def test_seed_for_seed_is_the_mean_difference_against_the_pooled_spread():
    a = {0.0: 0.850, 1.0: 0.845, 2.0: 0.858}
    b = {0.0: 0.835, 1.0: 0.822, 2.0: 0.838}
    test = seed_for_seed(a, b, sd=0.007, dof=13)
    gap = statistics.mean(a.values()) - statistics.mean(b.values())
    # By hand: the mean of 3 differences has the standard error sd sqrt(2 / 3).
    assert test.t == pytest.approx(gap / (0.007 * math.sqrt(2 / 3)))
    assert (test.dof, test.p) == (13, pytest.approx(t_two_sided_p(test.t, 13)))
    assert test.seeds == (0.0, 1.0, 2.0) and not test.subset and not test.own
    assert test.text() == (f"t = {test.t:.2f} seed for seed on seeds 0, 1 and 2, sd 0.007 once "
                           f"each seed's shift is out, p = {test.p:.2g}")
    # No seeds in common, or no spread: no test.
    assert seed_for_seed({0.0: 0.8}, {1.0: 0.7}, sd=0.007, dof=13) is None
    assert seed_for_seed(a, b, sd=math.nan, dof=0) is None


def test_only_the_seeds_both_sides_ran_are_compared_and_their_means_said():
    test = seed_for_seed({0.0: 0.779}, {0.0: 0.800, 1.0: 0.790, 2.0: 0.810}, sd=0.007, dof=13)
    assert test.seeds == (0.0,) and test.subset
    assert (test.mean, test.other_mean) == (0.779, 0.800)
    assert test.t == pytest.approx(-0.021 / (0.007 * math.sqrt(2)))
    assert test.text().startswith("seed 0 on both sides, 0.779 against 0.800; t = -2.12 seed "
                                  "for seed, sd 0.007")


def test_a_pair_whose_differences_spread_unlike_the_pool_is_held_to_its_own():
    """The full run's warm-up arm (seed 0 at 0.753, seeds 1 and 2 at 0.815 and 0.813)
    against 1 worker at lr 0.2: its differences spread 0.040, where the pool allows a
    difference 0.007 sqrt(2); held to the pool it would read 0.038 lower at p =
    1.5e-05, held to its own, not told apart."""
    warm = {0.0: 0.7528, 1.0: 0.8150, 2.0: 0.8131}
    one = {0.0: 0.8355, 1.0: 0.8205, 2.0: 0.8383}
    test = seed_for_seed(warm, one, sd=0.007, dof=13)
    differences = [warm[seed] - one[seed] for seed in warm]
    own = statistics.stdev(differences)
    assert test.own and test.dof == 2 and test.sd == pytest.approx(own)
    assert test.t == pytest.approx(statistics.mean(differences) / (own / math.sqrt(3)))
    assert test.p > 0.05
    assert test.spread_f == pytest.approx(own ** 2 / (2 * 0.007 ** 2))
    assert "on the pair's own differences, sd 0.040, as they spread more than the sweep's " \
           "(F = 16.4, above 3.81, its 95% point on 2 and 13 degrees of freedom)" in test.text()
    # A pair within the pool's spread is held to the pool: more degrees of freedom.
    assert not seed_for_seed({0.0: 0.80, 1.0: 0.81}, {0.0: 0.79, 1.0: 0.80}, 0.007, 13).own
    # No own spread from one seed: the pool.
    assert not seed_for_seed({0.0: 0.70}, {0.0: 0.80}, 0.007, 13).own
    # Power is not reckoned on a spread the pair does not share.
    assert resolution_text(-0.038, (3, 3), Noise(0.05, 0.06, acc_sd=0.015, acc_dof=17),
                           test) == ""


def _configuration(name: str, lr: float, accs: dict, warmup_epochs: int = 0) -> list[dict]:
    return [{"trial_id": f"{name}{seed:g}", "seed": seed, "lr": lr, "final_test_acc": acc,
             "final_train_loss": 0.4, "num_classes": 10, "status": "finished",
             "epoch_s": 1.0, "model": "lenet", "sync": "scratch", "transport": "",
             "split": "even", "precision": "fp32", "threads_per_worker": 1,
             "straggler_slowdown": 1.0, "num_workers": 1, "global_batch_size": 256,
             "momentum": 0.0, "num_epochs": 2, "warmup_epochs": warmup_epochs,
             "warmup_start_lr": 0.0} for seed, acc in accs.items()]


SHIFTS = {0.0: 0.0, 1.0: 0.010, 2.0: 0.020}


def _summary(wide: bool = False) -> pd.DataFrame:
    """Five configurations of three seeds, each seed shifted alike (SHIFTS) plus a
    little noise of its own; with `wide`, a sixth whose seeds spread ten times as far."""
    rng = np.random.default_rng(3)
    rows = []
    for index, lr in enumerate((0.05, 0.1, 0.2, 0.4, 0.8)):
        rows += _configuration(f"c{index}", lr, {seed: 0.80 + 0.01 * index + shift
                                                 + rng.normal(0, 0.002)
                                                 for seed, shift in SHIFTS.items()})
    if wide:
        rows += _configuration("w", 0.4, {0.0: 0.75, 1.0: 0.83, 2.0: 0.80}, warmup_epochs=1)
    return pd.DataFrame(rows)


def test_the_sweep_fits_each_seeds_shift_and_tests_seed_for_seed_with_its_ids():
    summary = _summary()
    noise = estimate_noise(summary)
    # 15 seeds less 5 configurations' means and 2 seeds' shifts.
    assert noise.acc_blocked_dof == 8 and noise.acc_blocked_sd < 0.004
    assert noise.acc_sd > 0.008  # without the shifts, they count as spread
    assert dict(noise.acc_seed_shifts) == pytest.approx({1.0: 0.010, 2.0: 0.020}, abs=0.003)
    assert noise.acc_seed_for_seed and noise.acc_wide == ()
    # With seeds (cells carry theirs, `by_seed`): seed for seed. Without: as before.
    low, high = (cell(summary[summary["lr"] == lr]) for lr in (0.05, 0.1))
    compared = compare_cells(high, low, noise)
    gap = high["final_test_acc"] - low["final_test_acc"]
    assert compared.startswith(f"{gap:.3f} higher (t = ") and 0.008 < gap < 0.012
    assert "seed for seed on seeds 0, 1 and 2" in compared
    assert cells_differ(high, low, noise) == 1
    assert isinstance(noise.seed_test({0.0: 0.8, 1.0: 0.81}, {0.0: 0.79, 1.0: 0.80}),
                      SeedForSeedT)
    assert isinstance(noise.seed_test([0.8, 0.81], [0.79, 0.80]), Welch)
    assert isinstance(noise.seed_test({0.0: 0.8}, {1.0: 0.79, 2.0: 0.80}), PooledT)
    # The same gap by Welch's test, the seeds taken as independent, is not told apart:
    # each side's seeds spread by the shifts, 0.010.
    assert noise.seed_test([0.80, 0.81, 0.82], [0.79, 0.80, 0.81]).p > 0.05
    sentence = noise.sentence()
    assert ("fitted as a mean per configuration plus a shift per seed shared by all of them, "
            f"seed 1's {dict(noise.acc_seed_shifts)[1.0]:+.3f} and seed 2's "
            f"{dict(noise.acc_seed_shifts)[2.0]:+.3f} from the first seed's") in sentence
    assert "seed for seed where the two sides ran seeds in common" in sentence
    rows = {row["what varied"]: row for row in noise.table_rows()}
    assert rows["final test accuracy, seed for seed (each seed's shift out)"][
        "degrees of freedom"] == 8


def test_a_configuration_whose_seeds_spread_unlike_the_others_is_left_out_of_the_pool():
    """The full run's pool: one configuration (the warm-up arm) held 66% of the spread
    left once each seed's shift was out; with it, 0.013 for every comparison, without
    it 0.007."""
    narrow, wide = estimate_noise(_summary()), estimate_noise(_summary(wide=True))
    assert wide.acc_blocked_sd == pytest.approx(narrow.acc_blocked_sd)
    assert wide.acc_blocked_dof == narrow.acc_blocked_dof
    ((what, f, dof, rest, tested),) = wide.acc_wide
    assert (what, dof, rest, tested) == ("1 worker, global batch 256, lr 0.4, a 1-epoch warm-up",
                                         2, 8, 6)
    assert f > f_quantile(2, 8, 0.05 / 6)
    assert ("The seeds of one configuration (1 worker, global batch 256, lr 0.4, a 1-epoch "
            "warm-up) spread more than the others' allow") in wide.sentence()
    # Still compared, against its own differences.
    arm = cell(_summary(wide=True).query("trial_id.str.startswith('w')", engine="python"))
    twin = cell(_summary().query("lr == 0.4"))
    assert "on the pair's own differences" in compare_cells(arm, twin, wide)
    assert cells_gap(arm, twin, wide) == pytest.approx(arm["final_test_acc"]
                                                       - twin["final_test_acc"])
    # Too few configurations to say which is unlike the rest: none is left out.
    two = _summary(wide=True).query("lr == 0.4")
    assert estimate_noise(two).acc_wide == ()
