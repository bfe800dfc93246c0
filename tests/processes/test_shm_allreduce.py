"""The shared-memory allreduce on real processes: gloo's sums, exactly, or gloo itself."""

import datetime
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pathlib import Path

from helpers import REPO, shared_dict
from orchestrator.driver.cluster import free_local_port
from orchestrator.training.sync.collectives import allreduce_
from orchestrator.training.sync.shm_allreduce import (FILE_PREFIX, MismatchError, PeerExitedError,
                                        PeerTimeoutError, SharedMemoryAllreduce, _create,
                                        stores_in_program_order)

pytestmark = pytest.mark.skipif(not stores_in_program_order(),
                                reason="the shared-memory allreduce runs on x86-64 only")

# What a Python process started by a test needs on its path to import this
# module: its folder, helpers.py's and the repository's.
IMPORT_PATHS = [str(Path(__file__).resolve().parent), str(REPO / "tests"), str(REPO)]
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


def _start(rank: int, world_size: int, port: int, timeout_s: float = 1800) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))


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


def _mismatch_body(rank: int, port: int, passed: list, results) -> None:
    _start(rank, 2, port)
    reducer = SharedMemoryAllreduce.connect(CAPACITY_BYTES)
    reducer.allreduce_(torch.ones(4))  # a first call that agrees
    shape, dtype = passed[rank]
    try:
        reducer.allreduce_(torch.ones(shape, dtype=dtype))
        results[rank] = "returned"
    except MismatchError as error:
        results[rank] = str(error)


@pytest.mark.reliability(fault="shared-memory allreduce: workers pass tensors of different "
                               "shapes or dtypes", lost="the run: every worker raises at once")
def test_workers_passing_different_tensors_both_raise_naming_both():
    passed = [((2, 3), torch.float32), ((7,), torch.float64)]
    expected = ["torch.float32 tensor of shape [2, 3]", "torch.float64 tensor of shape [7]"]
    with shared_dict() as results:
        mp.spawn(_mismatch_body, args=(free_local_port(), passed, results), nprocs=2)
        results = dict(results)
    for rank in (0, 1):
        assert "allreduce mismatch" in results[rank], results[rank]
        assert "worker 0" in results[rank] and "worker 1" in results[rank], results[rank]
        assert all(fragment in results[rank] for fragment in expected), results[rank]
        assert "call 2" in results[rank]


def _stuck_peer_body(rank: int, port: int, results) -> None:
    _start(rank, 2, port, timeout_s=2)  # the group's own timeout, not set on the reducer
    reducer = SharedMemoryAllreduce.connect(CAPACITY_BYTES)
    reducer.allreduce_(torch.ones(4))
    if rank == 1:
        time.sleep(5.5)  # alive, but stuck past the group's timeout
        os._exit(0)
    started, cpu_started = time.monotonic(), time.process_time()
    try:
        reducer.allreduce_(torch.ones(4))
        results[0] = ("returned",)
    except (PeerExitedError, PeerTimeoutError) as error:
        results[0] = (type(error).__name__, time.monotonic() - started,
                      time.process_time() - cpu_started, str(error))


@pytest.mark.reliability(fault="shared-memory allreduce: a live peer stuck past the process "
                               "group's timeout", lost="the run: the waiting worker raises")
def test_a_stuck_peer_costs_no_core_and_ends_after_the_groups_timeout():
    with shared_dict() as results:
        mp.spawn(_stuck_peer_body, args=(free_local_port(), results), nprocs=2)
        outcome = results[0]
    name, waited_s, cpu_s = outcome[:3]
    assert name == "PeerTimeoutError", outcome
    assert 2 <= waited_s < 5.5, outcome
    # Spinning would take a core for the whole wait; sleeping takes a sliver.
    assert cpu_s < 0.25 * waited_s, outcome


def _hold_a_file(directory: str, name: str, then: str) -> None:
    """Create our file as rank 0 does; then exit at once without removing its
    name, as a rank 0 killed mid-connect would, or stay alive holding it."""
    held = _create(Path(directory) / name, 4096)  # (mapping, file): the file holds the lock
    assert held is not None
    print("created", flush=True)
    if then == "exit":
        os._exit(0)
    time.sleep(600)


def _connect_body(rank: int, port: int, directory: str, results) -> None:
    _start(rank, 2, port)
    results[rank] = SharedMemoryAllreduce.connect(CAPACITY_BYTES, directory=directory) is not None


@pytest.mark.reliability(fault="shared-memory allreduce: rank 0 dies between creating its "
                               "file in /dev/shm and removing its name",
                         lost="nothing: the next group to connect removes the file")
def test_a_dead_creators_file_is_removed_and_a_live_ones_kept(tmp_path):
    holders = {then: subprocess.Popen(
        [sys.executable, "-c", f"import test_shm_allreduce as t; "
                               f"t._hold_a_file({str(tmp_path)!r}, '{FILE_PREFIX}{then}', '{then}')"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(IMPORT_PATHS)})
        for then in ("exit", "live")}
    for holder in holders.values():
        assert holder.stdout.readline().strip() == "created"
    try:
        holders["exit"].wait(timeout=60)
        for then in ("exit", "live"):  # old enough to judge (see STALE_AFTER_S)
            os.utime(tmp_path / f"{FILE_PREFIX}{then}", (time.time() - 3600,) * 2)
        with shared_dict() as results:
            mp.spawn(_connect_body, args=(free_local_port(), str(tmp_path), results), nprocs=2)
            assert dict(results) == {0: True, 1: True}
        assert sorted(path.name for path in tmp_path.iterdir()) == [f"{FILE_PREFIX}live"]
    finally:
        holders["live"].kill()
        holders["live"].wait()


NAMESPACED_PEER = """
import os, sys, time, torch
sys.path[:0] = {paths!r}
import test_shm_allreduce as t
from orchestrator.training.sync.shm_allreduce import SharedMemoryAllreduce
rank = int(sys.argv[1])
t._start(rank, 2, {port}, timeout_s=120)
reducer = SharedMemoryAllreduce.connect(t.CAPACITY_BYTES)
reducer.allreduce_(torch.ones(4))
if rank == 1:
    print("pid in its namespace:", os.getpid(), flush=True)
    time.sleep(2)
    os._exit(0)
started = time.monotonic()
try:
    reducer.allreduce_(torch.ones(4))
    print("returned")
except Exception as error:
    print(f"{{type(error).__name__}} after {{time.monotonic() - started:.1f}} s: {{error}}")
"""


@pytest.mark.skipif(shutil.which("unshare") is None
                    or subprocess.run(["unshare", "--pid", "--fork", "true"]).returncode != 0,
                    reason="cannot make a PID namespace here")
@pytest.mark.reliability(fault="shared-memory allreduce: a peer in another PID namespace "
                               "(containers sharing /dev/shm) dies mid-allreduce",
                         lost="the run: the survivor raises within seconds")
def test_a_peer_in_another_pid_namespace_is_seen_to_die():
    code = NAMESPACED_PEER.format(paths=IMPORT_PATHS, port=free_local_port())
    peer = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", code, "1"],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    survivor = subprocess.run([sys.executable, "-c", code, "0"], capture_output=True, text=True,
                              timeout=100, cwd=REPO)
    assert "pid in its namespace: 1" in peer.communicate(timeout=60)[0]
    # Its PID, 1 in its namespace, is this one's init: alive whatever the peer does.
    assert survivor.stdout.startswith("PeerExitedError after"), survivor.stdout + survivor.stderr
    assert float(survivor.stdout.split()[2]) < 10, survivor.stdout
