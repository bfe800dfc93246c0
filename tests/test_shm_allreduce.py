"""The shared-memory allreduce on real processes: gloo's sums, exactly, or gloo itself."""

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import shared_dict
from orchestrator.cluster import free_local_port
from orchestrator.collectives import allreduce_
from orchestrator.shm_allreduce import (PeerExitedError, PeerTimeoutError, SharedMemoryAllreduce,
                                        stores_in_program_order)

pytestmark = pytest.mark.skipif(not stores_in_program_order(),
                                reason="the shared-memory allreduce runs on x86-64 only")

# 256 bytes hold 64 float32s or 32 float64s: the larger tensors below go in pieces.
CAPACITY_BYTES = 256


def _tensors_of(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(rank)
    return [
        torch.randn(1, generator=generator),
        torch.randn(1001, generator=generator),  # 16 pieces, the last one partial
        torch.randn(7, 3, generator=generator, dtype=torch.float64),
        torch.randn(5, 40, generator=generator).t(),  # not contiguous
        torch.randint(-1000, 1000, (33,), generator=generator),  # int64
    ]


def _start(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)


def _sums_body(rank: int, world_size: int, port: int, results) -> None:
    _start(rank, world_size, port)
    try:
        reducer = SharedMemoryAllreduce.connect(CAPACITY_BYTES)
        through_memory = _tensors_of(rank)
        for step in range(3):  # again and again, as every training step does
            if step:
                through_memory = _tensors_of(rank)
            for tensor in through_memory:
                assert reducer.allreduce_(tensor) is tensor
        through_gloo = _tensors_of(rank)
        for tensor in through_gloo:
            allreduce_(tensor)
        results[rank] = {"memory": through_memory, "gloo": through_gloo,
                         "leftover": [name for name in os.listdir("/dev/shm")
                                      if name.startswith("orchestrator-allreduce-")]}
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [2, 3])
def test_sums_equal_gloo_and_agree_on_every_worker(world_size):
    with shared_dict() as results:
        mp.spawn(_sums_body, args=(world_size, free_local_port(), results), nprocs=world_size)
        results = dict(results)
    originals = [_tensors_of(rank) for rank in range(world_size)]
    for rank in range(world_size):
        got = results[rank]
        assert got["leftover"] == []  # rank 0 removed the file's name once all had mapped it
        for index, (memory, gloo) in enumerate(zip(got["memory"], got["gloo"])):
            assert memory.dtype == gloo.dtype and memory.stride() == gloo.stride()
            # Bit for bit the same tensor on every worker: replicas must not drift.
            assert torch.equal(memory, results[0]["memory"][index]), index
            if memory.dtype == torch.int64 or world_size == 2:
                # Integer sums, and float sums of two, do not depend on the order.
                assert torch.equal(memory, gloo), index
                assert torch.equal(memory, sum(tensors[index] for tensors in originals)), index
            else:
                torch.testing.assert_close(memory, gloo, rtol=1e-6, atol=1e-6)


def _other_node_body(rank: int, port: int, folders: list[str], results) -> None:
    _start(rank, 2, port)
    try:
        # Each worker's own folder stands for its own node's /dev/shm.
        results[rank] = SharedMemoryAllreduce.connect(CAPACITY_BYTES, directory=folders[rank])
        results[f"files{rank}"] = os.listdir(folders[rank])
    finally:
        dist.destroy_process_group()


def test_workers_on_different_nodes_all_get_none(tmp_path):
    folders = [str(tmp_path / "node0"), str(tmp_path / "node1")]
    for folder in folders:
        os.mkdir(folder)
    with shared_dict() as results:
        mp.spawn(_other_node_body, args=(free_local_port(), folders, results), nprocs=2)
        results = dict(results)
    assert results[0] is None and results[1] is None
    assert os.listdir(folders[0]) == []  # rank 0 created its file, and removed it


def _peer_fails_body(rank: int, port: int, how: str, results) -> None:
    _start(rank, 2, port)
    reducer = SharedMemoryAllreduce.connect(CAPACITY_BYTES)
    reducer.allreduce_(torch.ones(4))  # both mapped and in step
    if rank == 1:
        if how == "stalls":
            time.sleep(5)  # alive, but never arrives within the 2 s timeout
        os._exit(0)  # dies without a word, as a SIGKILLed worker does
    reducer.wait_timeout_s = 2.0
    started = time.monotonic()
    try:
        reducer.allreduce_(torch.ones(4))
        results[rank] = "returned"
    except (PeerExitedError, PeerTimeoutError) as error:
        results[rank] = (f"{type(error).__name__} after {time.monotonic() - started:.1f} s: "
                         f"{error}")


@pytest.mark.parametrize("how, error", [("exits", "PeerExitedError"),
                                        ("stalls", "PeerTimeoutError")])
def test_a_dead_or_stuck_peer_ends_the_wait_with_an_error(how, error):
    with shared_dict() as results:
        context = mp.start_processes(_peer_fails_body, args=(free_local_port(), how, results),
                                     nprocs=2, join=False)
        deadline = time.monotonic() + 60
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, "the allreduce with a failed peer did not end"
        outcome = results.get(0, "nothing recorded")
    assert outcome.startswith(error) and "worker 1" in outcome, outcome
