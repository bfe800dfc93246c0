"""`--precision fp16`'s loss scale keeps k workers and one device the same optimizer.

On 2 gloo processes, each sync strategy trains LeNet in fp16 (float16 autocast,
fp32 weights) for 3 steps of an uneven global batch of 257, with momentum, and
at its 2nd step one worker's loss is multiplied by 2^30 before backward, as a
batch that overflows float16 does on one device of many: that worker's
gradients hold inf before the sum. Every worker then skips the step and halves
the scale, `sharded`'s too, whose workers each hold a different part of the
sum, and `delayed`'s, which reads the overflow a step later. The replicas stay
identical, and they end where one process ends that trains on the whole global
batch with the same overflow at the same step: the same skipped step and scale,
the parameters to float16's rounding.

The tolerance, on the norm of the whole update (all parameters' change from
the initial weights): a weight's gradient leaves float16 autocast rounded to
float16 (a unit roundoff of 2^-11 = 4.9e-4), the whole batch's once, each
shard's once before their fp32 sum. Measured on a 2-core EPYC without
AVX-512: 2.5e-4 for every strategy; the tolerance is 10 times that. For
scale: one device's fp16 run (without the overflow) differs from its fp32 run
by 1.0e-2, and from its run with the overflow (one of its updates skipped) by
0.71; a wrong sum would be off by about half (one of two shards missed or
counted twice) or 256-fold (the scale of 2^8 divided out twice or not at all).
"""

import dataclasses

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import equivalence_config, run_here, shared_dict
from orchestrator.config.options import SYNC_STRATEGIES
from orchestrator.driver.cluster import free_local_port
from orchestrator.training import loss_scale, step
from orchestrator.training.models import build_model

NUM_WORKERS = 2
OVERFLOW_STEP = 1  # from 0, of 3: a step before it and one after it, at half the scale
OVERFLOW_RANK = 1
# Small enough that LeNet's gradients never overflow float16 of themselves: the one
# overflow is the injected one, so that a skip cannot hinge on a shard's rounding.
INITIAL_SCALE = 2.0 ** 8
# Of the whole update's norm (the docstring says why).
FP16_UPDATE_RTOL = 2.5e-3


_ORIGINAL = step.forward_backward


def _overflowing(overflows: bool):
    """The step's forward and backward, whose OVERFLOW_STEP-th call (from this one
    on) overflows float16 where `overflows`."""
    calls = [0]

    def forward_backward(model, images, labels, config, *, loss_scale=1.0):
        calls[0] += 1
        if calls[0] - 1 == OVERFLOW_STEP and overflows:
            loss_scale *= 2.0 ** 30
        return _ORIGINAL(model, images, labels, config, loss_scale=loss_scale)

    return forward_backward


def _config(sync: str, num_workers: int):
    return dataclasses.replace(
        equivalence_config((sync, "lenet", 257, "fp16", "nchw"), num_workers=num_workers,
                           momentum=0.5, shared_memory=False), num_epochs=1)


def _workers_body(rank: int, port: int, dataset, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=NUM_WORKERS)
    try:
        torch.set_num_threads(1)
        loss_scale.INITIAL_SCALE = INITIAL_SCALE
        for sync in SYNC_STRATEGIES:
            step.forward_backward = _overflowing(rank == OVERFLOW_RANK)
            results[(sync, rank)] = run_here(_config(sync, NUM_WORKERS), dataset)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_worker_runs(fashion_mnist_small) -> dict:
    with shared_dict() as results:
        mp.spawn(_workers_body, args=(free_local_port(), fashion_mnist_small, results),
                 nprocs=NUM_WORKERS)
        return dict(results)


@pytest.mark.parametrize("sync", SYNC_STRATEGIES)
def test_an_overflow_on_one_worker_is_skipped_on_all(two_worker_runs, fashion_mnist_small,
                                                     monkeypatch, sync):
    history, state = two_worker_runs[(sync, 0)]
    other_history, other_state = two_worker_runs[(sync, OVERFLOW_RANK)]
    # The overflow skipped one step, on every worker, and halved the scale there.
    assert [row["skipped_steps"] for row in history] == [1]
    assert [row["loss_scale"] for row in history] == [INITIAL_SCALE / 2]
    assert [row["status"] for row in history] == ["ok"]
    assert [row["skipped_steps"] for row in other_history] == [1]
    # The replicas are one: bit for bit, and the same optimizer state.
    for name, tensor in state["model"].items():
        assert torch.equal(tensor, other_state["model"][name]), name

    # One device: its one worker overflows at the same step.
    monkeypatch.setattr(step, "forward_backward", _overflowing(True))
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", INITIAL_SCALE)
    want_history, want_state = run_here(_config(sync, 1), fashion_mnist_small)
    assert ([row["skipped_steps"] for row in want_history]
            == [row["skipped_steps"] for row in history])
    assert ([row["loss_scale"] for row in want_history]
            == [row["loss_scale"] for row in history])
    initial = build_model("lenet", seed=7).state_dict()
    want_update = torch.cat([(want - initial[name]).flatten()
                             for name, want in want_state["model"].items()])
    got_update = torch.cat([(got - initial[name]).flatten()
                            for name, got in state["model"].items()])
    difference = ((got_update - want_update).norm() / want_update.norm()).item()
    assert difference < FP16_UPDATE_RTOL, difference
    assert state["optimizer"]["state"].keys() == want_state["optimizer"]["state"].keys()
