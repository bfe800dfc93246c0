"""The proportional split (13.6, exercise 2): shares that follow measured speed,
the single-device update kept whatever the shares, and a real straggler.

The equivalence runs reuse tests/test_equivalence.py's configs and
single-device reference, with the shares re-set at every step from each
step's timings, so that they are uneven and change as the run goes.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import shared_dict
from orchestrator.training.checkpoint import load_checkpoint
from orchestrator.driver.cluster import free_local_port
from orchestrator.config.options import TrainConfig
from orchestrator.training.loop import run_training
from orchestrator.training.models import build_model
from orchestrator.records import epoch_line
from orchestrator.config.dataset import even_shares
from orchestrator.training.split import proportional_shares
from orchestrator.driver.trial import run_trial
from orchestrator.training.worker import busy_process_on
from test_equivalence import EXACT_STRATEGIES, FP64_RTOL, _config, _run

UNEVEN_BATCH = 255  # 128 + 127 on 2 workers, 85 each on 3 before the first re-split


@pytest.mark.parametrize("total, speeds, expected", [
    (256, [2.0, 1.0], (170, 86)),
    (255, [1.0, 1.0, 1.0], (85, 85, 85)),
    (256, [1.0, 1.0], (128, 128)),
    (10, [1000.0, 1.0, 1.0], (8, 1, 1)),  # every worker keeps one example
    (3, [1.0, 5.0, 9.0], (1, 1, 1)),
    (7, [1.0, 1.0, 1.0], (3, 2, 2)),  # a tie goes to the lower rank
])
def test_shares_follow_speed_sum_to_the_batch_and_keep_one_each(total, speeds, expected):
    shares = proportional_shares(total, speeds)
    assert shares == expected
    assert sum(shares) == total and min(shares) >= 1


def test_even_shares_are_the_even_split():
    assert even_shares(255, 2) == (128, 127) and even_shares(7, 3) == (3, 2, 2)


def test_the_epoch_line_shows_each_workers_share_and_compute_seconds():
    metrics = {"epoch": 2, "train_loss": 0.5, "train_acc": 0.8, "test_acc": 0.8,
               "epoch_time_s": 4.0, "samples_per_s": 1000.0, "sync_time_s": 0.5, "status": "ok",
               "worker_shares": [170, 86], "worker_compute_s": [3.0, 3.1]}
    assert epoch_line(metrics, 3).endswith("sync 0.50 s), shares 170/86 computing 3.00/3.10 s")
    one_worker = epoch_line({**metrics, "worker_shares": [256], "worker_compute_s": [3.0]}, 3)
    assert one_worker.endswith("sync 0.50 s)")


def _assert_same_updates(state: dict, reference: dict) -> None:
    """As test_equivalence checks fp64 runs: every update to a relative 1e-9 of
    its tensor's largest."""
    initial = build_model("lenet", seed=7).state_dict()
    for name, expected in reference.items():
        expected_update = expected - initial[name].double()
        assert expected_update.abs().max() > 0, name
        torch.testing.assert_close(state[name] - initial[name].double(), expected_update,
                                   rtol=FP64_RTOL,
                                   atol=FP64_RTOL * expected_update.abs().max().item(),
                                   msg=lambda message: f"update of {name}: {message}")


def _uneven(history: list[dict]) -> bool:
    """Whether some epoch's shares were not the even split."""
    return any(row["worker_shares"] != list(even_shares(row["global_batch_size"],
                                                        row["num_workers"]))
               for row in history)


@pytest.fixture(scope="module")
def one_device_parameters(fashion_mnist_small) -> dict[str, torch.Tensor]:
    """The reference of every strategy: they are one update on one device."""
    reference = _config(("scratch", "lenet", UNEVEN_BATCH, "fp64", "nchw"))
    return _run(reference, fashion_mnist_small)[1]["model"]


def _proportional(num_workers: int, sync: str):
    return _config((sync, "lenet", UNEVEN_BATCH, "fp64", "nchw"), num_workers=num_workers,
                   split="proportional", split_interval_steps=1)


@pytest.mark.cluster
@pytest.mark.parametrize("sync", EXACT_STRATEGIES)
def test_two_workers_with_proportional_shares_match_one_device(ray_session, fashion_mnist_small,
                                                                one_device_parameters, tmp_path,
                                                                sync):
    result = run_trial(_proportional(2, sync), ray.put(fashion_mnist_small),
                       name=f"split-{sync}", storage_path=str(tmp_path), max_failures=0)
    assert _uneven(result.return_value), [row["worker_shares"] for row in result.return_value]
    with result.checkpoint.as_directory() as folder:
        state, _, _ = load_checkpoint(Path(folder))
    _assert_same_updates(state["model"], one_device_parameters)


def _three_process_body(rank: int, port: int, dataset, results) -> None:
    # Three workers do not fit the tests' 2-CPU Ray, so a plain gloo group runs
    # the same loop, as a Ray Train worker group would: every strategy in turn.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    try:
        for sync in EXACT_STRATEGIES:
            states = []
            history = run_training(_proportional(3, sync), dataset, device=torch.device("cpu"),
                                   report=lambda metrics, state, *_: states.append(state))
            if rank == 0:
                results[sync] = states[-1]["model"], history
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def three_worker_runs(fashion_mnist_small) -> dict:
    """(final parameters, history) per strategy, from one start of three processes."""
    with shared_dict() as results:
        mp.spawn(_three_process_body, nprocs=3,
                 args=(free_local_port(), fashion_mnist_small, results))
        return dict(results)


# Three processes on the CI's two cores, every strategy: about 20 s, the slow layer's.
@pytest.mark.cluster
@pytest.mark.parametrize("sync", EXACT_STRATEGIES)
def test_three_workers_with_proportional_shares_match_one_device(three_worker_runs,
                                                                  one_device_parameters, sync):
    parameters, history = three_worker_runs[sync]
    assert _uneven(history), [row["worker_shares"] for row in history]
    _assert_same_updates(parameters, one_device_parameters)


@pytest.mark.processes
def test_pinning_gives_each_local_rank_its_own_cores():
    allowed = sorted(os.sched_getaffinity(0))
    script = ("import os, sys; from orchestrator.training.worker import pin_to_own_cores; "
              "print(pin_to_own_cores(int(sys.argv[1]), 1), sorted(os.sched_getaffinity(0)))")
    for local_rank in range(2):
        run = subprocess.run([sys.executable, "-c", script, str(local_rank)], check=True,
                             capture_output=True, text=True)
        core = allowed[local_rank % len(allowed)]
        assert run.stdout.split() == [f"[{core}]", f"[{core}]"], run.stdout


@pytest.mark.cluster
def test_a_proportional_split_gives_a_straggler_less_and_ends_epochs_sooner(ray_session,
                                                                     fashion_mnist_small, tmp_path):
    # Worker 1 (local rank 1) is pinned to the second core, beside a busy process.
    busy = busy_process_on(sorted(os.sched_getaffinity(0))[1])
    try:
        histories = {}
        for split in ("even", "proportional"):
            config = TrainConfig(model="lenet", num_workers=2, global_batch_size=256, lr=0.2,
                                 num_epochs=3, train_limit=12 * 256, test_limit=200, split=split,
                                 pin_cores=True)
            result = run_trial(config, ray.put(fashion_mnist_small), name=f"straggler-{split}",
                               storage_path=str(tmp_path), max_failures=0)
            histories[split] = result.return_value
    finally:
        busy.kill()
        busy.wait()
    proportional = histories["proportional"]
    seen = {split: [(row["worker_shares"], row["worker_compute_s"], row["sync_time_s"],
                     row["epoch_time_s"]) for row in history]
            for split, history in histories.items()}
    # Epoch 1 of both is the even split; a proportional split re-sets the shares after it.
    for history in histories.values():
        first = history[0]["worker_compute_s"]
        assert first[1] > 1.3 * first[0], seen  # the straggler, measured (about 2x)
    for row in proportional[1:]:
        assert row["worker_shares"][1] < 0.8 * row["worker_shares"][0], seen  # about 1:2
    # Given less, the straggler's forward and backward take about as long as
    # the other's. (Rank 0's wait is no measure: a core shared with a busy
    # process answers each step's allreduce late, whatever its share.)
    imbalance = {split: min(max(row["worker_compute_s"]) / min(row["worker_compute_s"])
                            for row in history[1:])
                 for split, history in histories.items()}
    assert imbalance["proportional"] - 1 < 0.5 * (imbalance["even"] - 1), seen  # excess halved
    # The same steps, less waiting: the best epoch of each (about 1.3-1.5x quiet).
    best = {split: min(row["epoch_time_s"] for row in history[1:])
            for split, history in histories.items()}
    assert best["proportional"] < 0.9 * best["even"], seen
