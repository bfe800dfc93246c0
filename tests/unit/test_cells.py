"""A cell: the replicas (seeds) of one configuration as one row. Its means are
numpy's, for speed (the answers build thousands of cells); here they are held to
pandas' groupby, the definition they replaced."""

import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.report.answers.cells import MEASURES, cell


def _trials(rng, rows):
    trials = pd.DataFrame({column: rng.uniform(0.1, 1.0, rows) for column in MEASURES})
    trials["seed"] = rng.integers(0, 3, rows)
    trials["final_train_loss"] = rng.choice([0.4, 2.3], rows)  # 2.3: did not learn
    trials["num_classes"] = 10
    trials["model"] = "lenet"
    return trials


@pytest.mark.parametrize("seed", range(6))
def test_a_cells_means_are_per_seed_means_averaged_nan_skipped(seed):
    rng = np.random.default_rng(seed)
    trials = _trials(rng, 7)
    # Holes: an epoch time one trial lacks, a speedup no trial has (1-worker rows).
    trials.loc[trials.index[rng.integers(0, 7)], "epoch_s"] = math.nan
    trials["speedup"] = math.nan
    got = cell(trials)
    per_seed = trials.groupby("seed")[MEASURES].mean()
    for column in MEASURES:
        assert got[column] == pytest.approx(per_seed[column].mean(), nan_ok=True), column
    assert got["seeds"] == trials["seed"].nunique()
    assert got["seed_ids"] == tuple(per_seed.index.astype(float))
    assert got["by_seed"]["final_test_acc"] == pytest.approx(tuple(per_seed["final_test_acc"]))
    failed = (trials["final_train_loss"] > 2).groupby(trials["seed"]).any()
    assert got["not_learned"] == failed.sum()
    learned_acc = per_seed["final_test_acc"][~failed].mean()
    assert got["learned_acc"] == pytest.approx(learned_acc, nan_ok=True)
    assert (got["model"], got.name) == ("lenet", trials.index[0])


def test_a_trial_without_a_seed_is_in_no_seeds_mean():
    trials = _trials(np.random.default_rng(0), 3).assign(seed=[0.0, math.nan, 1.0])
    got = cell(trials)
    assert got["seeds"] == 2
    assert got["epoch_s"] == pytest.approx(trials["epoch_s"].iloc[[0, 2]].mean())


def test_no_trials_is_no_cell():
    assert cell(_trials(np.random.default_rng(0), 0)) is None
