"""The book's claim on CUDA: k workers that share one GPU, or own one GPU each, and
one device are the same optimizer.

Workers that share a GPU (`--gpus-per-worker` 0.5 or less) run their process group
on gloo, which sums CUDA tensors where NCCL refuses two ranks on one device;
the calls gloo does not take on CUDA tensors go through host memory
(collectives.staged_through_host). Here k = 2 and 3 plain gloo processes, each
on cuda:0, run the real loop (no Ray) in double precision: every strategy and
the proportional split (and at k = 2, every strategy with 3 micro-batches of
gradient accumulation a step) end with one device's parameters to the equivalence
tests' relative 1e-9 (tests/processes/test_equivalence.py: the same on CPUs),
`delayed` with its own one-worker run, and with `--sync-batchnorm` two workers
normalise as one device does. CUDA's fp64 kernels sum in their own orders, far
below that tolerance; float32 is not checked here (its rounding is the CPU
tests' subject). In fp16, with one worker's batch overflowing float16 at one
step, every strategy skips that step on every worker and ends where one GPU
ends with the same overflow, to the CPU test's tolerance
(tests/processes/test_fp16_loss_scale.py; cuDNN's and cuBLAS's float16 kernels
round otherwise than the CPU's: not yet run on a GPU).

On a machine of k GPUs or more the same runs are made by k workers on GPUs of
their own, cuda:0 to cuda:k-1, over NCCL, as Ray Train's GPU workers sum (the
product's own case, and the one a node of eight runs): NCCL's allreduce,
reduce-scatter, all-gather, broadcast and send/receive on fp64, DDP's hooks, the
delayed sums' overlap and SyncBatchNorm on NCCL. Skipped, in one line, where the
machine has fewer GPUs (the lent ones have one).

Needs a CUDA GPU: skipped without one (tests/conftest.py); CI has none, and
bench/gpu_check.py runs this layer on a lent GPU.
"""

import dataclasses
import functools

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import (EXACT_STRATEGIES, FP16_INITIAL_SCALE, OVERFLOW_RANK, assert_fp16_runs_agree,
                     assert_same_parameters, assert_same_updates, equivalence_config,
                     fp16_config, overflowing, proportional_config, run_here, shared_dict,
                     uneven)
from orchestrator.config.options import SYNC_STRATEGIES, TrainConfig
from orchestrator.driver.cluster import free_local_port
from orchestrator.training import loss_scale, models, recipe, step
from orchestrator.training.models import build_model

GPU = torch.device("cuda", 0)
CASES = [(sync, "lenet", 257, "fp64", "nchw") for sync in EXACT_STRATEGIES]  # 257: uneven shards
SPLIT_SYNCS = ("scratch", "sharded")
DELAYED = ("delayed", "lenet", 257, "fp64", "nchw")
RESNET_CASE = ("scratch", "resnet18", 64, "fp64", "nchw")
DDP_STRAGGLER = ("ddp", "lenet", 256, "fp32", "nchw")
SMALL_RESNET_WIDTH = 4  # the book's ResNet-18 at 1/16 of its width, BatchNorms and all


SHARED, OWN = "sharing one GPU", "on GPUs of their own"
# A hang limit above bench/gpu_check.py's per-test one: the first test of each k
# pays, in its setup, for the module fixture's runs of every case.
pytestmark = pytest.mark.timeout(400)


def _on_gpu(case, num_workers: int, placed: str = SHARED, **overrides) -> TrainConfig:
    """`case` as `--use-gpu yes --gpus-per-worker 1/k` runs it (k workers on one GPU),
    or as `--use-gpu yes` does (a GPU each: `placed` OWN)."""
    return equivalence_config(case, num_workers=num_workers, use_gpu=True,
                              gpus_per_worker=1 / num_workers if placed == SHARED else 1.0,
                              **overrides)


def _split_on_gpu(num_workers: int, sync: str, placed: str = SHARED) -> TrainConfig:
    return dataclasses.replace(proportional_config(num_workers, sync), use_gpu=True,
                               gpus_per_worker=1 / num_workers if placed == SHARED else 1.0)


def _fp16_on_gpu(sync: str, num_workers: int, placed: str = SHARED) -> TrainConfig:
    return fp16_config(sync, num_workers=num_workers, use_gpu=True,
                       gpus_per_worker=1 / num_workers if placed == SHARED else 1.0)


def _run(config: TrainConfig, dataset, device: torch.device = GPU) -> tuple[list[dict], dict]:
    """The history and the model's parameters (on the CPU: they leave the process)."""
    history, state = run_here(config, dataset, device)
    return history, {"model": state["model"]}


def _workers_body(rank: int, num_workers: int, placed: str, port: int, dataset,
                  results) -> None:
    device = GPU if placed == SHARED else torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo" if placed == SHARED else "nccl",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=num_workers)
    try:
        models.BUILDERS["resnet18"] = functools.partial(models.resnet18, width=SMALL_RESNET_WIDTH)
        # Every rank its own initial weights: only the broadcast can make them agree.
        recipe.build_model = lambda name, *, seed, **shape: build_model(
            name, seed=seed + 1000 * rank, **shape)
        on = functools.partial(_on_gpu, num_workers=num_workers, placed=placed)
        runs = {case: _run(on(case), dataset, device) for case in CASES}
        for sync in SPLIT_SYNCS:
            runs[("split", sync)] = _run(_split_on_gpu(num_workers, sync, placed), dataset,
                                         device)
        runs[DELAYED] = _run(on(DELAYED, momentum=0.5), dataset, device)
        if num_workers == 2:
            runs["sync_batchnorm"] = _run(on(RESNET_CASE, sync_batchnorm=True), dataset, device)
            runs["ddp_straggler"] = _run(on(DDP_STRAGGLER, straggler_slowdown=3.0), dataset,
                                         device)
            for sync in SYNC_STRATEGIES:  # DDP's no_sync on NCCL among them
                runs[("accumulated", sync)] = _run(
                    on((sync, "lenet", 257, "fp64", "nchw"), accumulation_steps=3), dataset,
                    device)
            loss_scale.INITIAL_SCALE = FP16_INITIAL_SCALE
            for sync in SYNC_STRATEGIES:
                step.forward_backward = overflowing(rank == OVERFLOW_RANK)
                runs[("fp16", sync)] = _run(_fp16_on_gpu(sync, num_workers, placed), dataset,
                                            device)
        if rank == 0:
            results.update(runs)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=[(2, SHARED), (3, SHARED), (2, OWN), (3, OWN)],
                ids=lambda param: f"{param[0]}-workers-{'shared' if param[1] == SHARED else 'own'}")
def k_workers_on_gpus(request, fashion_mnist_small) -> tuple[int, str, dict]:
    """(k, each case's (history, parameters)) of k workers sharing cuda:0 over gloo,
    or on cuda:0 to cuda:k-1 over NCCL where the machine has k GPUs."""
    num_workers, placed = request.param
    if placed == OWN and torch.cuda.device_count() < num_workers:
        pytest.skip(f"{num_workers} workers {OWN} need {num_workers} GPUs; this machine has "
                    f"{torch.cuda.device_count()}")
    with shared_dict() as results:
        mp.spawn(_workers_body, args=(num_workers, placed, free_local_port(),
                                      fashion_mnist_small, results), nprocs=num_workers)
        return num_workers, placed, dict(results)


@pytest.fixture(scope="module")
def one_gpu(fashion_mnist_small):
    """A run in this process on the GPU alone, computed when first asked for."""
    original = models.BUILDERS["resnet18"]
    models.BUILDERS["resnet18"] = functools.partial(models.resnet18, width=SMALL_RESNET_WIDTH)

    @functools.cache
    def run(config):
        return _run(config, fashion_mnist_small)

    yield run
    models.BUILDERS["resnet18"] = original


@pytest.mark.parametrize("sync", SYNC_STRATEGIES)
def test_two_workers_on_gpus_accumulating_micro_batches_match_one_gpu(k_workers_on_gpus,
                                                                      one_gpu, sync):
    """--accumulation-steps 3 on CUDA: each worker's shard in 3 micro-batches, summed
    once a step (ddp's hooks held back but for the last), is one GPU's whole batch."""
    num_workers, _, results = k_workers_on_gpus
    if num_workers != 2:
        pytest.skip("checked at 2 workers")
    history, state = results[("accumulated", sync)]
    assert [row["accumulation_steps"] for row in history] == [3, 3]
    want_history, want_state = one_gpu(_on_gpu(
        (sync if sync == "delayed" else "scratch", "lenet", 257, "fp64", "nchw"), 1))
    for row, want in zip(history, want_history, strict=True):
        assert row["train_loss"] == pytest.approx(want["train_loss"], rel=1e-9)
    assert_same_parameters(state["model"], want_state["model"],
                           build_model("lenet", seed=7).state_dict(), "fp64")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case[0])
def test_k_workers_on_gpus_match_one_gpu(k_workers_on_gpus, one_gpu, case):
    num_workers, placed, results = k_workers_on_gpus
    history, state = results[case]
    assert [row["backend"] for row in history] == ["gloo" if placed == SHARED else "nccl"] * 2
    devices = (["cuda:0"] * num_workers if placed == SHARED
               else [f"cuda:{rank}" for rank in range(num_workers)])
    assert [row["devices"] for row in history] == ["[" + ", ".join(devices) + "]"] * 2
    want_history, want_state = one_gpu(_on_gpu(("scratch", *case[1:]), 1))
    for row, want in zip(history, want_history, strict=True):
        assert row["status"] == want["status"] == "ok"
        assert row["train_loss"] == pytest.approx(want["train_loss"], rel=1e-9)
        assert (row["train_acc"], row["test_acc"]) == (want["train_acc"], want["test_acc"])
    assert_same_parameters(state["model"], want_state["model"],
                           build_model("lenet", seed=7).state_dict(), "fp64")


@pytest.mark.parametrize("sync", SPLIT_SYNCS)
def test_the_proportional_split_on_gpus_is_one_gpus_update(k_workers_on_gpus, one_gpu, sync):
    num_workers, _, results = k_workers_on_gpus
    history, state = results[("split", sync)]
    assert uneven(history), [row["worker_shares"] for row in history]
    _, want = one_gpu(_split_on_gpu(1, "scratch"))
    assert_same_updates(state["model"], want["model"])


def test_delayed_on_gpus_is_its_one_worker_run(k_workers_on_gpus, one_gpu):
    """`delayed` is another optimizer (one-step-delayed SGD); on one worker it is
    the plain-torch reference (tests/processes/test_delayed_sync.py)."""
    _, _, results = k_workers_on_gpus
    _, state = results[DELAYED]
    _, want = one_gpu(_on_gpu(DELAYED, 1, momentum=0.5))
    assert_same_parameters(state["model"], want["model"],
                           build_model("lenet", seed=7).state_dict(), "fp64")


def test_sync_batchnorm_makes_two_workers_one_gpu(k_workers_on_gpus, one_gpu):
    """torch's SyncBatchNorm gathers its statistics with a list all-gather under
    gloo (torch/nn/modules/_functions.py; into one tensor under NCCL), so two workers,
    on one GPU or on two, normalise with the global batch's statistics: one device's
    parameters again."""
    num_workers, _, results = k_workers_on_gpus
    if num_workers != 2:
        pytest.skip("checked at 2 workers")
    _, state = results["sync_batchnorm"]
    _, want = one_gpu(_on_gpu(RESNET_CASE, 1, sync_batchnorm=True))
    assert_same_parameters(state["model"], want["model"],
                           build_model("resnet18", seed=7).state_dict(), "fp64")


def test_ddps_compute_on_a_gpu_leaves_out_the_wait_for_a_slower_worker(k_workers_on_gpus):
    """A review (2026-11-29): on a GPU backward's end waits on the stream for every
    bucket's sum, so a worker's compute took in the other workers' pace, and a
    proportional split saw two equal speeds. With the last worker emulating a device
    3x slower, the first's forward and backward are its own: well under the other's
    (before the mark, as long as the other's)."""
    num_workers, _, results = k_workers_on_gpus
    if num_workers != 2:
        pytest.skip("checked at 2 workers")
    history, _ = results["ddp_straggler"]
    fast, slow = history[-1]["worker_compute_s"]
    assert fast < 0.6 * slow, history[-1]["worker_compute_s"]


@pytest.mark.parametrize("sync", SYNC_STRATEGIES)
def test_an_fp16_overflow_on_one_worker_is_skipped_on_all(k_workers_on_gpus, monkeypatch, sync,
                                                          fashion_mnist_small):
    num_workers, placed, results = k_workers_on_gpus
    if num_workers != 2:
        pytest.skip("checked at 2 workers")
    history, state = results[("fp16", sync)]
    monkeypatch.setattr(step, "forward_backward", overflowing(True))
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", FP16_INITIAL_SCALE)
    want_history, want_state = _run(_fp16_on_gpu(sync, 1), fashion_mnist_small)
    assert_fp16_runs_agree(history, {"model": state["model"]}, want_history, want_state)
