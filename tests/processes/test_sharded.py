"""`--sync sharded` on 2 and 3 real gloo processes: each worker's part of the update
is the full SGD's, with momentum and weight decay, the state it saves and
resumes from is the full optimizer's, and a non-finite gradient in any part
stops every worker."""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from helpers import shared_dict
from orchestrator.driver.cluster import free_local_port
from orchestrator.config.options import TrainConfig
from orchestrator.records import Status
from orchestrator.training.loop import run_training
from orchestrator.training.sync.strategies import make_sync

# Not the loop's plain SGD: every piece of state and every hyperparameter the
# shard's optimizer must copy from the full one.
HYPERPARAMETERS = dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
NUM_STEPS = 3
RESUMED_STEPS = 2


def _model() -> nn.Module:
    # 15 + 5 + 10 + 2 = 32 parameters: parts of 16 on 2 workers, of 11 on 3 (the last padded).
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()


def _inputs(rank: int, step: int) -> torch.Tensor:
    return torch.linspace(-1, 1, 12, dtype=torch.float64).view(4, 3) * (rank + 1) + step


def _lr(step: int) -> float:
    return HYPERPARAMETERS["lr"] * (step + 1)  # changed every step, as a warm-up does


def _train(model, sync, optimizer, rank: int, steps: range) -> None:
    for step in steps:
        for group in optimizer.param_groups:
            group["lr"] = _lr(step)
        model(_inputs(rank, step)).square().sum().backward()
        sync.synchronize()
        sync.step(optimizer)
        sync.zero_grad()


def _body(rank: int, num_workers: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=num_workers)
    try:
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), **HYPERPARAMETERS)
        sync = make_sync("sharded", model, torch.device("cpu"), bucket_cap_mb=25,
                         shared_memory=False, optimizer=optimizer)
        assert not optimizer.state  # held in parts
        _train(model, sync, optimizer, rank, range(NUM_STEPS))
        saved = copy.deepcopy({"model": model.state_dict(),
                               "optimizer": sync.optimizer_state_dict(optimizer)})
        # Resumed as the loop resumes: a fresh model and optimizer load the full state.
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), **HYPERPARAMETERS)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sync = make_sync("sharded", model, torch.device("cpu"), bucket_cap_mb=25,
                         shared_memory=False, optimizer=optimizer)
        _train(model, sync, optimizer, rank, range(NUM_STEPS, NUM_STEPS + RESUMED_STEPS))
        results[rank] = {"saved": saved, "final": model.state_dict(),
                         "sync_time_s": sync.sync_time_s}
    finally:
        dist.destroy_process_group()


def _one_device(num_workers: int) -> tuple[dict, dict]:
    """What one process computes from the summed gradients of every rank's inputs."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), **HYPERPARAMETERS)
    for step in range(NUM_STEPS + RESUMED_STEPS):
        if step == NUM_STEPS:
            saved = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        for group in optimizer.param_groups:
            group["lr"] = _lr(step)
        sum(model(_inputs(rank, step)).square().sum() for rank in range(num_workers)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return saved, model.state_dict()


@pytest.mark.parametrize("num_workers", [2, 3])
def test_sharded_sgd_is_the_full_sgd_and_saves_its_state(num_workers):
    with shared_dict() as results:
        mp.spawn(_body, args=(num_workers, free_local_port(), results), nprocs=num_workers)
        results = dict(results)
    want_saved, want_final = _one_device(num_workers)
    assert want_saved["optimizer"]["state"][0]["momentum_buffer"].abs().max() > 0
    for rank in range(num_workers):
        got = results[rank]
        assert got["sync_time_s"] > 0
        for name, want in want_saved["model"].items():
            torch.testing.assert_close(got["saved"]["model"][name], want, rtol=1e-12, atol=1e-14)
        saved_optimizer = got["saved"]["optimizer"]
        assert saved_optimizer["param_groups"] == want_saved["optimizer"]["param_groups"]
        assert saved_optimizer["state"].keys() == want_saved["optimizer"]["state"].keys()
        for index, state in want_saved["optimizer"]["state"].items():
            torch.testing.assert_close(saved_optimizer["state"][index]["momentum_buffer"],
                                       state["momentum_buffer"], rtol=1e-12, atol=1e-14)
        for name, want in want_final.items():
            torch.testing.assert_close(got["final"][name], want, rtol=1e-12, atol=1e-14)


def _diverging_body(rank: int, port: int, dataset, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # test_worker_loop's diverging run: lr 50 makes a gradient non-finite within an epoch.
        config = TrainConfig(global_batch_size=64, lr=50.0, num_epochs=3, train_limit=2048,
                             test_limit=100, num_workers=2, sync="sharded")
        history = run_training(config, dataset, device=torch.device("cpu"),
                               report=lambda *_: None)
        results[rank] = [row["status"] for row in history]
    finally:
        dist.destroy_process_group()


def test_a_non_finite_part_stops_every_worker(fashion_mnist_small):
    # Each worker checks only its part of the summed gradient; the verdict is
    # summed over workers, so all stop at the same step (a worker that went on
    # alone would wait forever in the next reduce-scatter).
    with shared_dict() as results:
        mp.spawn(_diverging_body, args=(free_local_port(), fashion_mnist_small, results), nprocs=2)
        results = dict(results)
    assert results == {0: [Status.DIVERGED], 1: [Status.DIVERGED]}
