"""The book's claim, as a test: k workers and one device are the same optimizer.

For each gradient-sync strategy, and for each way of summing (through the
node's shared memory or over gloo), 2 Ray Train workers with half a global
batch each end with the parameters that one process computes on the whole
batch, also when the batch does not split evenly. The runs are in double
precision: in float32 the two only agree to rounding (summing two shards'
gradients is not the same float32 sum as one batch's), and after a few steps
of training that rounding is all a comparison could see, whichever torch
version's kernels did the sums. The default float32 path is checked too, to
the looser tolerance rounding leaves.
"""

from pathlib import Path

import pytest
import ray
import torch

from orchestrator.checkpoint import load_checkpoint
from orchestrator.config import SYNC_STRATEGIES, TrainConfig
from orchestrator.loop import run_training
from orchestrator.models import build_model
from orchestrator.shm_allreduce import stores_in_program_order
from orchestrator.trial import run_trial

pytestmark = pytest.mark.cluster

# Two epochs of three steps: several updates, and a reshuffle in between.
STEPS_PER_EPOCH = 3
# float64 rounding of a few steps is near 1e-15 of the values; a wrong sum
# (a shard counted twice or missed, a mean instead of a sum) is off by tens of
# percent.
FP64_RTOL = 1e-9


def _config(global_batch_size: int, precision: str, **overrides) -> TrainConfig:
    return TrainConfig(model="lenet", global_batch_size=global_batch_size, lr=0.5, num_epochs=2,
                       train_limit=STEPS_PER_EPOCH * global_batch_size, test_limit=200, seed=7,
                       precision=precision, **overrides)


def _single_device_parameters(config: TrainConfig, dataset) -> dict[str, torch.Tensor]:
    states = []
    run_training(config, dataset, device=torch.device("cpu"),
                 report=lambda metrics, state, *_: states.append(state))
    return states[-1]["model"]


@pytest.mark.parametrize("sync, global_batch_size, precision, shared_memory", [
    # uneven: shards of 128 and 127
    *[(sync, 255, "fp64", True) for sync in SYNC_STRATEGIES],
    ("bucketed", 255, "fp64", False),  # summed by gloo rather than through shared memory
    ("scratch", 256, "fp64", True),
    ("bucketed", 256, "fp32", True),
])
def test_two_workers_match_one_device(ray_session, fashion_mnist_small, tmp_path,
                                      sync, global_batch_size, precision, shared_memory):
    reference = _single_device_parameters(_config(global_batch_size, precision), fashion_mnist_small)
    config = _config(global_batch_size, precision, num_workers=2, sync=sync,
                     shared_memory=shared_memory)
    result = run_trial(config, ray.put(fashion_mnist_small),
                       name=f"equiv-{sync}-{global_batch_size}-{precision}-{shared_memory}",
                       storage_path=str(tmp_path), max_failures=0)
    assert [row["epoch"] for row in result.return_value] == [1, 2]
    through_memory = shared_memory and sync != "ddp" and stores_in_program_order()
    assert result.return_value[-1]["transport"] == ("shared memory" if through_memory else "gloo")
    with result.checkpoint.as_directory() as folder:
        state, _, _ = load_checkpoint(Path(folder))
    initial = build_model("lenet", seed=config.seed).state_dict()
    for name, expected in reference.items():
        assert state["model"][name].dtype == expected.dtype, name
        if precision == "fp32":
            torch.testing.assert_close(state["model"][name], expected, rtol=1e-5, atol=1e-5,
                                       msg=lambda message: f"{name}: {message}")
            continue
        # The book's small init makes some weights' updates tiny next to the
        # weights, so it is the updates that must agree, each to a relative 1e-9
        # of the largest update of its tensor.
        expected_update = expected - initial[name].double()
        assert expected_update.abs().max() > 0, name
        torch.testing.assert_close(state["model"][name] - initial[name].double(), expected_update,
                                   rtol=FP64_RTOL,
                                   atol=FP64_RTOL * expected_update.abs().max().item(),
                                   msg=lambda message: f"update of {name}: {message}")
