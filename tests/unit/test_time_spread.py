"""Times told apart by Student's t on their logs against the spread of trials of
identical work (a review: the largest range, 10% for one epoch, was about 6.5 standard
deviations of an epoch, so sharded's epoch gap read as noise while its sync gap, the
larger, was significant; and the sync test's degrees of freedom counted one trial's
epochs as independent replicas)."""

import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.report.answers.compare import compare_times, times_differ
from orchestrator.report.answers.noise import (MIN_TEST_DOF, LogSpread, Noise, estimate_noise,
                                               log_spread, prepared)
from orchestrator.report.answers.welch import t_two_sided_p

sys.path.insert(0, str(Path(__file__).parents[1]))
import test_answers  # noqa: E402  (its hand-made exercises sweep)


def test_the_spread_is_pooled_over_groups_of_trials_and_counts_trials_not_epochs():
    groups = [np.array([10.0, 10.4, 9.8]), np.array([5.0, 5.2]), np.array([7.0])]
    epoch_logs = [np.log([10.0, 10.1, 9.9]), np.log([5.0, 5.3])]
    spread = log_spread(groups, epoch_logs)
    # By hand: the squared log deviations about each group's mean, over trials - groups
    # (the lone trial adds nothing).
    logs = [np.log(group) for group in groups[:2]]
    squares = sum(((values - values.mean()) ** 2).sum() for values in logs)
    assert spread.sd == pytest.approx(math.sqrt(squares / 3))
    assert (spread.dof, spread.trials, spread.groups) == (3, 5, 2)
    # Within a trial: each trial's epochs about its own mean, epochs - trials.
    within = sum(((values - values.mean()) ** 2).sum() for values in epoch_logs)
    assert spread.epoch_sd == pytest.approx(math.sqrt(within / 3))
    assert spread.epoch_dof == 3
    # Nothing repeated, or repeated with no spread at all: no test.
    assert log_spread([np.array([1.0]), np.array([2.0])]).dof == 0
    assert log_spread([np.array([3.0, 3.0])]).dof == 0


def test_two_times_are_tested_on_their_logs_each_side_one_trials_spread():
    spread = LogSpread(sd=0.02, dof=30, trials=34, groups=4, epoch_sd=0.015, epoch_dof=192)
    t, p = spread.test(9.4, 10.2)
    assert t == pytest.approx(math.log(9.4 / 10.2) / (0.02 * math.sqrt(2)))
    assert p == pytest.approx(t_two_sided_p(t, 30))
    # A side timed over one epoch: one trial's and one epoch's spread together.
    t_single, _ = spread.test(9.4, 10.2, single_epoch=True)
    assert t_single == pytest.approx(math.log(9.4 / 10.2) / (math.hypot(0.02, 0.015)
                                                              * math.sqrt(2)))
    # The resolution is the gap at which the test's p is the level.
    for single in (False, True):
        gap = spread.resolution(single)
        assert spread.test(1 + gap, 1.0, single)[1] == pytest.approx(0.05, rel=1e-6)
    assert spread.resolution(True) > spread.resolution()
    assert spread.test(0.0, 1.0) is None and spread.test(1.0, math.nan) is None


def test_too_few_repeated_trials_leave_the_range_to_decide():
    few = LogSpread(sd=0.02, dof=MIN_TEST_DOF - 1, trials=3, groups=1)
    assert not few.tests and few.test(9.0, 10.0) is None
    noise = Noise(time_fraction=0.05, acc=0.01, time_groups=(1, 3), time_spread=few)
    # 11% apart, beyond the 5% range: faster, with no t (none was run).
    assert compare_times(9.0, 10.0, noise) == "1.11x faster than"
    assert compare_times(9.8, 10.0, noise) == "within noise (2.0% apart, noise 5.0%) of"
    assert noise.time_resolution() == 0.05
    sentence = noise.sentence()
    assert "Too few trials repeat work for a t test of times (2 degrees of freedom" in sentence
    assert "so the range decides" in sentence


def test_compare_times_says_t_and_p_and_not_significantly_different_below_the_resolution():
    noise = Noise(time_fraction=0.10, acc=0.01, time_groups=(4, 34),
                  time_spread=LogSpread(0.02, 30, 34, 4, 0.015, 192))
    assert compare_times(9.4, 10.2, noise) == "1.09x faster (t = -2.89, p = 0.0071) than"
    assert compare_times(10.2, 9.4, noise) == "1.09x slower (t = 2.89, p = 0.0071) than"
    # 3% apart: under the 6% resolution, whatever the range said.
    assert compare_times(9.7, 10.0, noise) == (
        "not significantly different (3.1% apart; t = -1.08, p = 0.29) from")
    assert [times_differ(a, b, noise) for a, b in ((9.4, 10.2), (10.2, 9.4), (9.7, 10.0))] == [
        -1, 1, 0]
    # A time of another kind (scoring) against its own spread.
    scoring = LogSpread(0.08, 30, 34, 4)
    assert compare_times(9.4, 10.2, noise, spread=scoring).startswith(
        "not significantly different (8.5% apart")
    assert noise.time_noise_phrase() == (
        "the smallest gap in epoch time this sweep tells apart, 5.9%")


def test_the_sweeps_spreads_come_from_trials_and_their_epochs():
    summary = test_answers._summary()
    epochs = test_answers._epochs(summary)
    # Every trial's three epochs: the last two timed, the second 1% faster than the third.
    epochs.loc[epochs["epoch"] == 2, "epoch_time_s"] *= 0.99
    epochs.loc[epochs["epoch"] == 2, "sync_time_s"] *= 0.9
    table, window = prepared(summary, epochs)
    noise = estimate_noise(table, window)
    # Epoch time: scratch's 1-worker trials at batch 256 with bucketed's (at one worker
    # the same work: no sum; ddp's and sharded's are each alone) and the three l2 trials.
    spread = noise.time_spread
    assert (spread.trials, spread.groups) == (8, 2)
    assert spread.dof == spread.trials - spread.groups
    timed = table.set_index("trial_id")["epoch_s"]
    groups = [timed[["g1", "l1-0.1", "l1-0.2", "l1-0.4", "b1"]],
              timed[["l2-0.1", "l2-0.2", "l2-0.4"]]]
    logs = [np.log(group.to_numpy()) for group in groups]
    squares = sum(((values - values.mean()) ** 2).sum() for values in logs)
    assert spread.sd == pytest.approx(math.sqrt(squares / spread.dof))
    # One epoch about its trial's mean: every trial's two timed epochs, 1% apart.
    assert spread.epoch_dof == len(summary)
    assert spread.epoch_sd == pytest.approx(statistics.stdev(np.log([0.99, 1.0])), rel=1e-6)
    # Sync: the l2 trials at two workers, 3 of them, 2 degrees of freedom: too few.
    assert (noise.sync_spread.trials, noise.sync_spread.dof) == (3, 2)
    assert not noise.sync_spread.tests
    assert noise.sync_test(1.0, 2.0) is None


def test_a_summary_not_prepared_has_no_spreads():
    summary = test_answers._summary()
    noise = estimate_noise(summary.assign(epoch_s=summary["mean_epoch_time_s"],
                                          transport="shared memory"))
    assert noise.time_spread == LogSpread() and noise.sync_spread == LogSpread()


def test_13_5_1_says_what_the_per_worker_batch_saves_in_sync():
    """A review: per-worker batching halves the sums an epoch, and 13.5.1 did not say
    what that saved in sync time."""
    from orchestrator.report.answers.exercise_13_5_1 import _fewer_sums
    wide = pd.Series({"sync_share": 0.42 / 8.8, "epoch_s": 8.8, "steps_per_epoch": 117,
                      "seeds": 3})
    fixed = pd.Series({"sync_share": 0.59 / 9.1, "epoch_s": 9.1, "steps_per_epoch": 234,
                       "seeds": 3})
    noise = Noise(time_fraction=0.06, acc=0.01, sync_spread=LogSpread(0.095, 19, 22, 3))
    t = math.log(0.42 / 0.59) / (0.095 * math.sqrt(2))
    assert _fewer_sums(wide, fixed, noise) == (
        f"Its epoch spent 0.42 s in gradient sync (mean of 3 seeds), 29% shorter (t = {t:.2f} on "
        f"their logs, p = {t_two_sided_p(t, 19):.2g}) than the global batch's 0.59 s (mean of 3 "
        f"seeds): it sums the gradients once a step, 117 times an epoch against 234, the same "
        f"bytes each time whatever the batch (3.6 ms a sum against 2.5 ms: a sum's time also "
        f"holds the wait for the slower worker's step). With more workers or a slower link, "
        f"where sums take more of the epoch, the per-worker batch saves more.")
    wide_spread = Noise(time_fraction=0.06, acc=0.01, sync_spread=LogSpread(0.5, 19, 22, 3))
    assert _fewer_sums(wide, fixed, wide_spread).endswith("wait for the slower worker's step).")
    assert "not significantly different (40% apart" in _fewer_sums(wide, fixed, wide_spread)
    assert _fewer_sums(pd.Series({**wide, "sync_share": 0.0}), fixed, noise) == ""
