"""The allreduce helpers alone, at world size 1, and the buckets they sum in.
(tests/processes/test_collectives_on_processes.py: on two real gloo processes.)"""

import torch
import torch.distributed as dist

from helpers import mixed_tensors
from orchestrator.training.models import build_model
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


def test_the_root_sync_makes_its_pairs_links_before_any_timed_step(monkeypatch):
    """A review (2026-11-29): under NCCL each pair's first send sets up a communicator
    of its own, k-1 in turn on worker 0, inside the first timed epoch; one exchange of
    one element at construction makes them before it (every worker builds its sync at
    the same point of the loop)."""
    from orchestrator.training.sync import strategies

    exchanged = []
    monkeypatch.setattr(strategies, "root_allreduce_",
                        lambda tensor: exchanged.append(tensor.clone()) or tensor)
    strategies.RootSync(build_model("lenet", seed=0), torch.device("cpu"))
    assert [tensor.tolist() for tensor in exchanged] == [[0.0]]


def test_the_device_timer_stops_at_a_mark_queued_earlier(monkeypatch):
    """ddp on a GPU: backward's end waits on the stream for the other workers' sums, so
    a worker's compute ends at the mark its last bucket queued (`take_compute_end`),
    not where the stream reaches the step's own stop. CUDA events stood in for by
    marks with a time (no GPU here; tests/unit/test_gpu_timing.py has one)."""
    from orchestrator.training import timing

    clock = iter([0.0, 5.0, 9.0, 10.0])

    class Mark:
        def __init__(self, enable_timing=True):
            self.at = None

        def record(self):
            self.at = next(clock)

        def elapsed_time(self, other):  # milliseconds, as CUDA's
            return (other.at - self.at) * 1000

        def synchronize(self):
            pass

    monkeypatch.setattr(timing.torch.cuda, "Event", Mark)
    timer = timing.DeviceTimer(torch.device("cpu"))
    timer.on_gpu = True
    started = timer.start()   # 0 s
    compute_end = Mark()
    compute_end.record()      # 5 s: the last bucket's launch
    timer.stop(started, at=compute_end)
    assert timer.take() == 5.0
    started = timer.start()   # 9 s; the step's own stop, 10 s, without a mark
    timer.stop(started)
    assert timer.take() == 1.0
