"""The allreduce helpers alone, at world size 1, and the buckets they sum in.
(tests/processes/test_collectives_on_processes.py: on two real gloo processes.)"""

import torch
import torch.distributed as dist

from helpers import mixed_tensors
from orchestrator.training.sync.collectives import (all_gather_, allreduce_, broadcast_,
                                                    flat_buckets, gather_strings, get_rank,
                                                    get_world_size, reduce_scatter_)


def test_helpers_are_the_identity_without_a_process_group():
    assert not dist.is_initialized()
    assert (get_rank(), get_world_size()) == (0, 1)
    tensors = mixed_tensors(0)
    originals = [t.clone() for t in tensors]
    assert allreduce_(tensors[0]) is tensors[0]
    flat = tensors[3]  # with one worker, its part is the whole
    assert torch.equal(reduce_scatter_(flat), flat) and all_gather_(flat) is flat
    broadcast_(tensors)
    assert all(torch.equal(a, b) for a, b in zip(tensors, originals))
    assert gather_strings("cpu") == ["cpu"]


def test_flat_buckets_respect_the_cap_and_the_dtype():
    tensors = mixed_tensors(0)  # 48, 40, 16 (float64) and 4000 bytes
    assert [len(bucket) for bucket in flat_buckets(tensors, cap_bytes=100)] == [2, 1, 1]
    assert [len(bucket) for bucket in flat_buckets(tensors, cap_bytes=10_000)] == [2, 1, 1]
    assert [len(bucket) for bucket in flat_buckets(tensors[:2], cap_bytes=10_000)] == [2]
    # A tensor larger than the cap gets a bucket of its own.
    assert [len(bucket) for bucket in flat_buckets(tensors[3:], cap_bytes=8)] == [1]
