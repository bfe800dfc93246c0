"""Welch's t test, which decides 13.5.2's "held / did not hold" on the replicas: its
p-values against Student's t tables, and the verdicts it gives the linear rule."""

import math

import pytest

from orchestrator.report.answers.chapter_13_5 import _rule_verdict
from orchestrator.report.answers.evidence import Noise, _t_two_sided_p, welch


@pytest.mark.parametrize("t, dof, p", [
    (2.0, 10, 0.07339),       # tables: two-sided p of t = 2 at 10 degrees of freedom
    (2.776445, 4, 0.05),      # t(0.975, 4)
    (12.7062, 1, 0.05),       # t(0.975, 1): the Cauchy distribution
    (1.959964, 1e7, 0.05),    # the normal limit
    (0.0, 3.5, 1.0),
])
def test_two_sided_p_values_match_students_t(t, dof, p):
    assert _t_two_sided_p(t, dof) == pytest.approx(p, rel=1e-3)
    assert _t_two_sided_p(-t, dof) == _t_two_sided_p(t, dof)


def test_welch_on_replicas_and_when_no_test_is_possible():
    test = welch([0.70, 0.71, 0.72], [0.68, 0.69, 0.695])
    # By hand: means 0.71 and 0.688, variances 1e-4 and 5.83e-5 over 3 seeds each.
    se = math.sqrt(1e-4 / 3 + 0.0000583333 / 3)
    assert test.t == pytest.approx(0.0216667 / se, rel=1e-4)
    assert 3 < test.dof < 4 and test.p == pytest.approx(_t_two_sided_p(test.t, test.dof))
    assert 0.01 < test.p < 0.05
    assert welch([0.7], [0.6, 0.5]) is None  # one seed: no spread to test against
    assert welch([0.7, 0.7], [0.6, 0.6]) is None  # no spread on either side


def test_the_linear_rule_is_refuted_only_by_a_significant_or_a_beyond_noise_drop():
    noise = Noise(time_fraction=0.05, acc=0.02)
    significant, not_significant = (welch([0.60, 0.61, 0.62], [0.70, 0.71, 0.72]),
                                    welch([0.60, 0.70, 0.65], [0.66, 0.71, 0.69]))
    assert _rule_verdict(0.01, significant, noise) == "yes"
    assert _rule_verdict(-0.10, significant, noise) == "no"
    assert _rule_verdict(-0.04, not_significant, noise) == "within noise"
    # One seed on a side: the sweep's accuracy noise decides.
    assert _rule_verdict(-0.01, None, noise) == "within noise"
    assert _rule_verdict(-0.05, None, noise) == "no"
