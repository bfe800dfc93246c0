"""The book's claim at k = 1: with one worker every gradient-sync strategy is
the same update, so one run, the book's `scratch`, is every strategy's
reference in tests/processes/test_equivalence.py (k = 2 and 3 workers) and
tests/cluster/test_equivalence_on_ray.py (on Ray)."""

import torch

from helpers import EXACT_STRATEGIES, LENET_CASES, equivalence_config, run_here


def test_one_worker_is_the_same_update_for_every_strategy(fashion_mnist_small):
    case = LENET_CASES[-1]
    want_history, want_state = run_here(equivalence_config(("scratch", *case[1:])),
                                        fashion_mnist_small)
    for sync in EXACT_STRATEGIES:
        history, state = run_here(equivalence_config((sync, *case[1:])), fashion_mnist_small)
        assert [row["train_loss"] for row in history] == [row["train_loss"] for row in want_history]
        for name, want in want_state["model"].items():
            assert torch.equal(state["model"][name], want), (sync, name)
