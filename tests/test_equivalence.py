"""The book's claim, as a test: k workers and one device are the same optimizer.

For each gradient-sync strategy, 2 Ray Train workers with half a global
batch each end with the parameters that one process computes on the whole
batch, also when the batch does not split evenly.
"""

from pathlib import Path

import pytest
import ray
import torch

from orchestrator.config import SYNC_STRATEGIES, TrainConfig
from orchestrator.models import build_model
from orchestrator.trial import run_trial
from orchestrator.loop import load_checkpoint, run_training

# Two epochs of three steps: several updates, and a reshuffle in between.
STEPS_PER_EPOCH = 3


def _config(global_batch_size: int, **overrides) -> TrainConfig:
    return TrainConfig(model="lenet", global_batch_size=global_batch_size, lr=0.5, num_epochs=2,
                       train_limit=STEPS_PER_EPOCH * global_batch_size, test_limit=200, seed=7,
                       **overrides)


def _single_device_parameters(config: TrainConfig, dataset) -> dict[str, torch.Tensor]:
    states = []
    run_training(config, dataset, device=torch.device("cpu"),
                 report=lambda metrics, state, history: states.append(state))
    return states[-1]["model"]


@pytest.mark.parametrize("sync, global_batch_size", [
    *[(sync, 255) for sync in SYNC_STRATEGIES],  # uneven: shards of 128 and 127
    ("scratch", 256),
])
def test_two_workers_match_one_device(ray_session, fashion_mnist_small, tmp_path,
                                      sync, global_batch_size):
    reference = _single_device_parameters(_config(global_batch_size), fashion_mnist_small)
    config = _config(global_batch_size, num_workers=2, sync=sync)
    result = run_trial(config, ray.put(fashion_mnist_small), name=f"equiv-{sync}-{global_batch_size}",
                       storage_path=str(tmp_path), max_failures=0)
    assert [row["epoch"] for row in result.return_value] == [1, 2]
    with result.checkpoint.as_directory() as folder:
        state, _ = load_checkpoint(Path(folder))
    initial = build_model("lenet", seed=config.seed).state_dict()
    for name, expected in reference.items():
        torch.testing.assert_close(state["model"][name], expected, rtol=1e-5, atol=1e-5,
                                   msg=lambda message: f"{name}: {message}")
        # The book's small init makes some updates smaller than that tolerance,
        # so the updates themselves must agree too, to a relative 1e-3.
        expected_update = expected - initial[name]
        assert expected_update.abs().max() > 0, name
        torch.testing.assert_close(state["model"][name] - initial[name], expected_update,
                                   rtol=1e-3, atol=1e-3 * expected_update.abs().max().item(),
                                   msg=lambda message: f"update of {name}: {message}")
