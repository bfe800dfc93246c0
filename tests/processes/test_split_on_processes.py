"""The proportional split on three plain gloo processes, no Ray: shares re-set
at every step from each step's timings, uneven and changing as the run goes,
and still the single-device update (as tests/processes/test_equivalence.py
checks it) for every strategy; and the pinning that gives each local rank
its own cores.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import (EXACT_STRATEGIES, assert_same_updates, one_device_split_reference,
                     proportional_config, shared_dict, uneven)
from orchestrator.driver.cluster import free_local_port
from orchestrator.training.loop import run_training


@pytest.fixture(scope="module")
def one_device_parameters(fashion_mnist_small) -> dict[str, torch.Tensor]:
    """The reference of every strategy: they are one update on one device."""
    return one_device_split_reference(fashion_mnist_small)


def _three_process_body(rank: int, port: int, dataset, results) -> None:
    # Three workers do not fit the tests' 2-CPU Ray, so a plain gloo group runs
    # the same loop, as a Ray Train worker group would: every strategy in turn.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    try:
        for sync in EXACT_STRATEGIES:
            states = []
            history = run_training(proportional_config(3, sync), dataset,
                                   device=torch.device("cpu"),
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


# Three processes on the CI's two cores, every strategy: about 20 s.
@pytest.mark.parametrize("sync", EXACT_STRATEGIES)
def test_three_workers_with_proportional_shares_match_one_device(three_worker_runs,
                                                                  one_device_parameters, sync):
    parameters, history = three_worker_runs[sync]
    assert uneven(history), [row["worker_shares"] for row in history]
    assert_same_updates(parameters, one_device_parameters)


def test_pinning_gives_each_local_rank_its_own_cores():
    allowed = sorted(os.sched_getaffinity(0))
    script = ("import os, sys; from orchestrator.training.worker import pin_to_own_cores; "
              "print(pin_to_own_cores(int(sys.argv[1]), 1), sorted(os.sched_getaffinity(0)))")
    for local_rank in range(2):
        run = subprocess.run([sys.executable, "-c", script, str(local_rank)], check=True,
                             capture_output=True, text=True)
        core = allowed[local_rank % len(allowed)]
        assert run.stdout.split() == [f"[{core}]", f"[{core}]"], run.stdout
