"""The book's claim at k = 1: with one worker every gradient-sync strategy is
the same update, so one run, the book's `scratch`, is every strategy's
reference in tests/processes/test_equivalence.py (k = 2 and 3 workers) and
tests/cluster/test_equivalence_on_ray.py (on Ray)."""

import pytest
import torch

from helpers import (EXACT_STRATEGIES, FP64_RTOL, LENET_CASES, assert_same_parameters,
                     equivalence_config, run_here)
from orchestrator.training.models import build_model
from orchestrator.training.step import micro_slices


def test_one_worker_is_the_same_update_for_every_strategy(fashion_mnist_small):
    case = LENET_CASES[-1]
    want_history, want_state = run_here(equivalence_config(("scratch", *case[1:])),
                                        fashion_mnist_small)
    for sync in EXACT_STRATEGIES:
        history, state = run_here(equivalence_config((sync, *case[1:])), fashion_mnist_small)
        assert [row["train_loss"] for row in history] == [row["train_loss"] for row in want_history]
        for name, want in want_state["model"].items():
            assert torch.equal(state["model"][name], want), (sync, name)


def test_micro_batches_cover_a_shard_once_and_differ_by_at_most_one():
    assert micro_slices(10, 3) == [slice(0, 3), slice(3, 6), slice(6, 10)]
    assert micro_slices(10, 1) == [slice(0, 10)]
    # A shard smaller than the steps (no split makes one): one image each.
    assert micro_slices(2, 4) == [slice(0, 1), slice(1, 2)]


def test_gradient_accumulation_is_the_same_optimizer(fashion_mnist_small):
    """One device: the global batch in 4 micro-batches ends where it ends whole, to
    float64 rounding (the micro-batches' gradients are summed in another order)."""
    case = ("scratch", "lenet", 257, "fp64", "nchw")
    want_history, want_state = run_here(equivalence_config(case), fashion_mnist_small)
    history, state = run_here(equivalence_config(case, accumulation_steps=4),
                              fashion_mnist_small)
    assert [row["accumulation_steps"] for row in history] == [4, 4]
    for row, want in zip(history, want_history, strict=True):
        assert row["train_loss"] == pytest.approx(want["train_loss"], rel=FP64_RTOL)
        assert row["train_acc"] == want["train_acc"]
    assert_same_parameters(state["model"], want_state["model"],
                           build_model("lenet", seed=7).state_dict(), "fp64")
