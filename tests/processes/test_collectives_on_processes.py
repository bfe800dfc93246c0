"""The allreduce helpers on two real gloo processes: sums, buckets and
broadcast through shared memory and gloo, and a dead peer's error.
(tests/unit/test_collectives.py: alone, at world size 1.)"""

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from helpers import mixed_tensors, shared_dict
from orchestrator.driver.cluster import free_local_port
from orchestrator.training.sync import collectives
from orchestrator.training.sync.collectives import (all_gather_, allreduce_, broadcast_,
                                                    gather_strings, get_rank, get_world_size,
                                                    reduce_scatter_, root_allreduce_,
                                                    staged_through_host)
from orchestrator.records import SHARED_MEMORY_SYNCS
from orchestrator.training.sync.shm_allreduce import stores_in_program_order
from orchestrator.training.sync.base import GradientSync
from orchestrator.training.sync.strategies import make_sync


def _two_process_body(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        plain = mixed_tensors(rank)
        for tensor in plain:
            allreduce_(tensor)
        # A model whose gradients are 1 (rank 0) and 2 (rank 1) everywhere;
        # a 64-byte cap forces several buckets. Each strategy sums through
        # shared memory and through gloo.
        grads, transports = {}, {}
        for shared_memory in (True, False):
            for name in SHARED_MEMORY_SYNCS:
                model, sync = _model_with_gradient(rank, name, shared_memory=shared_memory,
                                                   bucket_cap_mb=64 / 2**20)
                key = f"{name}, shared memory {shared_memory}"
                grads[key] = [p.grad.clone() for p in model.parameters()]
                transports[key] = sync.transport
        weights = [torch.full((5,), float(rank)), torch.full((2, 2), 10.0 + rank)]
        broadcast_(weights)
        results[rank] = {"rank": get_rank(), "world": get_world_size(), "plain": plain,
                         "grads": grads, "transports": transports, "broadcast": weights,
                         "devices": gather_strings(f"dev{rank}"), "staged": _staged(rank)}
    finally:
        dist.destroy_process_group()


def _staged(rank: int) -> dict:
    """The calls that GPU workers sharing a device stage through host memory
    (collectives.staged_through_host: CUDA tensors under gloo), staged here on CPU
    tensors, whose host copies are copies all the same: each result must land in
    the caller's tensor. A strided tensor (channels-last) goes as its memory."""
    collectives.staged_through_host = lambda tensor: True
    try:
        flat = torch.arange(4.0) + 10 * rank  # rank 0: 0 1 2 3; rank 1: 10 11 12 13
        part = reduce_scatter_(flat).clone()  # each rank sums its half
        gathered = all_gather_(flat.clone())
        channels_last = (torch.arange(8.0).view(1, 2, 2, 2) + rank).contiguous(
            memory_format=torch.channels_last)
        root_allreduce_(channels_last)
        return {"part": part, "flat": flat, "gathered": gathered, "root": channels_last}
    finally:
        collectives.staged_through_host = staged_through_host


def _model_with_gradient(rank: int, strategy: str, **options) -> tuple[nn.Module, GradientSync]:
    """A small model after backward and `strategy`'s sync: every gradient was rank + 1."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    sync = make_sync(strategy, model, torch.device("cpu"), **options)
    for step in range(2):  # the second step checks that zero_grad keeps the sync working
        sync.zero_grad()
        # d(sum(w * c))/dw = c for every parameter w
        sum((p * (rank + 1.0)).sum() for p in model.parameters()).backward()
        sync.synchronize()
    return model, sync


def test_helpers_on_two_gloo_processes():
    with shared_dict() as results:
        mp.spawn(_two_process_body, args=(free_local_port(), results), nprocs=2)
        results = dict(results)
    expected_sums = [a + b for a, b in zip(mixed_tensors(0), mixed_tensors(1))]
    for rank in (0, 1):
        got = results[rank]
        assert (got["rank"], got["world"]) == (rank, 2)
        for tensor, expected in zip(got["plain"], expected_sums):
            assert tensor.dtype == expected.dtype
            assert torch.equal(tensor, expected), (tensor, expected)
        assert len(got["grads"]) == 4
        for key, grads in got["grads"].items():
            assert len(grads) == 4
            assert all(torch.equal(grad, torch.full_like(grad, 3.0)) for grad in grads), key
            expected_transport = ("shared memory" if key.endswith("True") and stores_in_program_order()
                                  else "gloo")
            assert got["transports"][key] == expected_transport, key
        assert torch.equal(got["broadcast"][0], torch.zeros(5))
        assert torch.equal(got["broadcast"][1], torch.full((2, 2), 10.0))
        assert got["devices"] == ["dev0", "dev1"]
        staged = got["staged"]
        half = slice(2 * rank, 2 * rank + 2)
        assert torch.equal(staged["part"], torch.tensor([10.0, 12.0, 14.0, 16.0])[half])
        own = torch.arange(4.0) + 10 * rank
        own[half] = staged["part"]  # the summed half in place, the other half its own
        assert torch.equal(staged["flat"], own)
        # Rank r's half from rank r, its sum: the whole sum everywhere, as sharded does it.
        assert torch.equal(staged["gathered"], torch.tensor([10.0, 12.0, 14.0, 16.0]))
        assert staged["root"].is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(staged["root"], 2 * torch.arange(8.0).view(1, 2, 2, 2) + 1)


def _peer_dies_body(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    allreduce_(torch.ones(4))  # both connected and in step
    if rank == 1:
        os._exit(0)  # dies without a word, as a SIGKILLed worker does
    started = time.monotonic()
    try:
        allreduce_(torch.ones(4))
        results[rank] = "returned"
    except RuntimeError as error:
        results[rank] = f"raised after {time.monotonic() - started:.1f} s: {error}"


def test_a_dead_peer_fails_the_polled_allreduce_instead_of_spinning():
    # allreduce_ polls for completion (see wait_busy): a collective that can
    # never complete must end in gloo's error, not in a loop that never ends.
    with shared_dict() as results:
        context = mp.start_processes(_peer_dies_body, args=(free_local_port(), results), nprocs=2,
                                     join=False)
        deadline = time.monotonic() + 60
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, "the allreduce with a dead peer did not end"
        outcome = results.get(0, "nothing recorded")
    assert outcome.startswith("raised after"), outcome


LATE_S = 1.0


def _late_peer_body(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        allreduce_(torch.ones(4))  # both connected and in step
        if rank == 1:
            time.sleep(LATE_S)  # a slow link's transfer, as rank 0 sees it
        wall, cpu = time.perf_counter(), time.thread_time()
        allreduce_(torch.ones(4))
        results[rank] = (time.perf_counter() - wall, time.thread_time() - cpu)
    finally:
        dist.destroy_process_group()


def test_a_long_wait_blocks_after_spinning_briefly():
    # wait_busy spins for SPIN_S, 20 ms (a short wait's wake-up would cost more), then
    # blocks: a wait of a second must not take a second of the waiting core.
    with shared_dict() as results:
        mp.spawn(_late_peer_body, args=(free_local_port(), results), nprocs=2)
        wall_s, cpu_s = results[0]
    assert wall_s > 0.9 * LATE_S
    assert cpu_s < 0.3 * LATE_S, f"rank 0's thread used {cpu_s:.2f} s of CPU waiting {wall_s:.2f} s"
