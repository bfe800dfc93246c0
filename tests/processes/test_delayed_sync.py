"""`--sync delayed` (13.6, exercise 3) is one-step-delayed SGD, whatever k:

    w_{t+1} = w_t - lr * g_t(w_{t-1})      (w_{-1} = w_0 at each epoch's start)

A plain-torch reference in one process, with no sync code at all, applies
each batch's gradient one step late and the epoch's last at its end; the
loop with `delayed` on 1 worker, on 2 and on 3 gloo processes (the last with
a proportional split re-set every step and two evaluations an epoch) ends
with its parameters to the equivalence tests' double-precision tolerance.
Plain SGD does not (so these tests can fail), and a run resumed from the
first epoch's checkpoint ends where the uninterrupted one does.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

from helpers import (FP64_RTOL, assert_same_parameters, equivalence_config, run_here,
                     shared_dict)
from orchestrator.config.options import TrainConfig
from orchestrator.driver.cluster import free_local_port
from orchestrator.training import recipe
from orchestrator.training.loop import run_training
from orchestrator.training.step import to_model_input
from orchestrator.training.models import build_model

MOMENTUM = 0.5  # the delayed gradients go through SGD's momentum too
CASE = ("delayed", "lenet", 257, "fp64", "nchw")  # 257: uneven shards on 2 and 3 workers


def _delayed(**overrides) -> TrainConfig:
    return equivalence_config(CASE, momentum=MOMENTUM, **overrides)


def one_step_delayed_sgd(config: TrainConfig, dataset) -> dict[str, torch.Tensor]:
    """The reference: the loop's batches (same shuffle, whole global batch), each
    gradient applied by torch's SGD one step later, the last at the epoch's end."""
    model = build_model(config.model, seed=config.seed).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    images = torch.from_numpy(dataset.train_images)
    labels = torch.from_numpy(dataset.train_labels).long()

    def apply(gradient: list[torch.Tensor]) -> None:
        for param, grad in zip(model.parameters(), gradient):
            param.grad = grad
        optimizer.step()

    for epoch in range(config.num_epochs):
        order = torch.randperm(config.num_train_examples, generator=torch.Generator().manual_seed(
            config.seed * 10_007 + epoch))
        pending = None
        for step in range(config.steps_per_epoch):
            index = order[step * config.global_batch_size:(step + 1) * config.global_batch_size]
            x = to_model_input(images[index]).double()
            loss = F.cross_entropy(model(x), labels[index])
            gradient = torch.autograd.grad(loss, list(model.parameters()))
            if pending is not None:
                apply(pending)
            pending = gradient
        apply(pending)
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


@pytest.fixture(scope="module")
def reference(fashion_mnist_small) -> dict[str, torch.Tensor]:
    return one_step_delayed_sgd(_delayed(), fashion_mnist_small)


def _initial() -> dict[str, torch.Tensor]:
    return build_model("lenet", seed=7).state_dict()


def test_one_worker_is_one_step_delayed_sgd(fashion_mnist_small, reference):
    history, state = run_here(_delayed(), fashion_mnist_small)
    assert [row["sync"] for row in history] == ["delayed"] * 2
    assert [row["transport"] for row in history] == ["none"] * 2
    assert_same_parameters(state["model"], reference, _initial(), "fp64")


def test_delayed_is_not_plain_sgd(fashion_mnist_small, reference):
    _, plain = run_here(equivalence_config(("bucketed", *CASE[1:]), momentum=MOMENTUM),
                        fashion_mnist_small)
    weight = "0.weight"
    initial = _initial()[weight].double()
    update, plain_update = reference[weight] - initial, plain["model"][weight] - initial
    difference = ((update - plain_update).abs().max() / plain_update.abs().max()).item()
    assert difference > 1e3 * FP64_RTOL, difference


def test_a_resumed_run_starts_a_fresh_pipeline_and_ends_where_it_would_have(fashion_mnist_small,
                                                                          reference):
    reports = []  # copies: a state shares the live tensors
    run_training(_delayed(), fashion_mnist_small, device=torch.device("cpu"),
                 report=lambda *checkpoint: reports.append(copy.deepcopy(checkpoint[1:])))
    _, resumed = _run_resumed(_delayed(), fashion_mnist_small, reports[0])
    assert_same_parameters(resumed["model"], reference, _initial(), "fp64")


def _run_resumed(config: TrainConfig, dataset, resume_from) -> tuple[list[dict], dict]:
    states = []
    history = run_training(config, dataset, device=torch.device("cpu"), resume_from=resume_from,
                           report=lambda metrics, state, *_: states.append(state))
    return history, states[-1]


def _workers_body(rank: int, num_workers: int, port: int, dataset, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=num_workers)
    try:
        torch.set_num_threads(1)
        # Every rank its own initial weights: only the broadcast can make them agree.
        recipe.build_model = lambda name, *, seed, **shape: build_model(
            name, seed=seed + 1000 * rank, **shape)
        overrides = ({"split": "proportional", "split_interval_steps": 1, "evals_per_epoch": 2}
                     if num_workers == 3 else {})
        history, state = run_here(_delayed(num_workers=num_workers, **overrides), dataset)
        if rank == 0:
            results["run"] = (history, state)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("num_workers", [2, 3])
def test_k_workers_are_one_step_delayed_sgd(fashion_mnist_small, reference, num_workers):
    with shared_dict() as results:
        mp.spawn(_workers_body, args=(num_workers, free_local_port(), fashion_mnist_small,
                                      results), nprocs=num_workers)
        history, state = results["run"]
    assert [row["num_workers"] for row in history] == [num_workers] * 2
    assert [row["transport"] for row in history] == ["gloo"] * 2
    for row in history:
        assert row["status"] == "ok"
        # The steps waited for part of the sums' time at most; gloo ran the rest behind them.
        assert 0 < row["sync_time_s"] and 0 < row["sync_in_flight_s"], row
        # Every rank's sync seconds, in rank order: rank 0's is the row's own.
        assert len(row["worker_sync_s"]) == num_workers, row
        assert row["worker_sync_s"][0] == row["sync_time_s"] and min(row["worker_sync_s"]) > 0
        # Step by step the least any rank waited: no more than any rank's whole epoch.
        assert 0 <= row["sync_least_s"] <= min(row["worker_sync_s"]) + 1e-9, row
    assert_same_parameters(state["model"], reference, _initial(), "fp64")
