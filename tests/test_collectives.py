"""The allreduce helpers on two real gloo processes, and alone at world size 1."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import free_port
from orchestrator.collectives import (allreduce_, allreduce_bucketed_, broadcast_, gather_strings,
                                      get_rank, get_world_size)


def _tensors_of(rank: int) -> list[torch.Tensor]:
    # Mixed sizes and dtypes, so that the bucketing splits and regroups them.
    return [torch.full((3, 4), rank + 1.0), torch.arange(10.0) * (rank + 1),
            torch.full((2,), rank + 1, dtype=torch.float64), torch.ones(1000) * (rank + 1)]


def _two_process_body(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        plain = _tensors_of(rank)
        for tensor in plain:
            allreduce_(tensor)
        bucketed = _tensors_of(rank)
        allreduce_bucketed_(bucketed, bucket_cap_bytes=64)  # forces several buckets
        weights = [torch.full((5,), float(rank)), torch.full((2, 2), 10.0 + rank)]
        broadcast_(weights)
        results[rank] = {"rank": get_rank(), "world": get_world_size(), "plain": plain,
                         "bucketed": bucketed, "broadcast": weights,
                         "devices": gather_strings(f"dev{rank}")}
    finally:
        dist.destroy_process_group()


def test_helpers_on_two_gloo_processes():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_two_process_body, args=(free_port(), results), nprocs=2)
        results = dict(results)
    expected_sums = [a + b for a, b in zip(_tensors_of(0), _tensors_of(1))]
    for rank in (0, 1):
        got = results[rank]
        assert (got["rank"], got["world"]) == (rank, 2)
        for name in ("plain", "bucketed"):
            for tensor, expected in zip(got[name], expected_sums):
                assert tensor.dtype == expected.dtype
                assert torch.equal(tensor, expected), (name, tensor, expected)
        assert torch.equal(got["broadcast"][0], torch.zeros(5))
        assert torch.equal(got["broadcast"][1], torch.full((2, 2), 10.0))
        assert got["devices"] == ["dev0", "dev1"]


def test_helpers_are_the_identity_without_a_process_group():
    assert not dist.is_initialized()
    assert (get_rank(), get_world_size()) == (0, 1)
    tensors = _tensors_of(0)
    originals = [t.clone() for t in tensors]
    assert allreduce_(tensors[0]) is tensors[0]
    allreduce_bucketed_(tensors, bucket_cap_bytes=64)
    broadcast_(tensors)
    assert all(torch.equal(a, b) for a, b in zip(tensors, originals))
    assert gather_strings("cpu") == ["cpu"]
