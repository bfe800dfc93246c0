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

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import (FP16_INITIAL_SCALE, OVERFLOW_RANK, assert_fp16_runs_agree, fp16_config,
                     overflowing, run_here, shared_dict)
from orchestrator.config.options import SYNC_STRATEGIES
from orchestrator.driver.cluster import free_local_port
from orchestrator.training import loss_scale, step

NUM_WORKERS = 2


def _workers_body(rank: int, port: int, dataset, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=NUM_WORKERS)
    try:
        torch.set_num_threads(1)
        loss_scale.INITIAL_SCALE = FP16_INITIAL_SCALE
        for sync in SYNC_STRATEGIES:
            step.forward_backward = overflowing(rank == OVERFLOW_RANK)
            results[(sync, rank)] = run_here(
                fp16_config(sync, num_workers=NUM_WORKERS, shared_memory=False), dataset)
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
    assert [row["status"] for row in history] == ["ok"]
    assert [row["skipped_steps"] for row in other_history] == [1]
    # The replicas are one, bit for bit.
    for name, tensor in state["model"].items():
        assert torch.equal(tensor, other_state["model"][name]), name
    # One device: its one worker overflows at the same step.
    monkeypatch.setattr(step, "forward_backward", overflowing(True))
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", FP16_INITIAL_SCALE)
    want_history, want_state = run_here(fp16_config(sync), fashion_mnist_small)
    # The same step skipped and the scale halved, on every worker as on one device.
    assert_fp16_runs_agree(history, state, want_history, want_state)
    assert state["optimizer"]["state"].keys() == want_state["optimizer"]["state"].keys()
