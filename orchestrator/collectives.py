"""Collective helpers over torch.distributed, the identity without a process group.

Ray Train creates the process group (gloo on CPUs, NCCL on GPUs); nothing
here creates one. With no group, or a group of one, every helper returns its
input unchanged, so the training loop also runs in a single process.
"""

from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def allreduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all workers, in place: every worker ends with the sum.

    This is the book's `allreduce`, with the copying between devices done by
    the communication backend instead of by hand.
    """
    if get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def allreduce_bucketed_(tensors: list[torch.Tensor], *, bucket_cap_bytes: int) -> None:
    """Sum each tensor over all workers, a few large messages instead of one per tensor.

    Tensors are packed into flat buffers of at most `bucket_cap_bytes` (a
    tensor larger than the cap gets a bucket of its own), each buffer is
    reduced in one call, and the sums are copied back. Fewer, larger
    messages pay the per-call latency once per bucket rather than once per
    tensor: the book's exercise 3 of 13.5.
    """
    if get_world_size() == 1:
        return
    for bucket in _buckets(tensors, bucket_cap_bytes):
        flat = torch.cat([t.reshape(-1) for t in bucket])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        for tensor, reduced in zip(bucket, flat.split([t.numel() for t in bucket])):
            tensor.copy_(reduced.view_as(tensor))


def broadcast_(tensors: Iterable[torch.Tensor], *, src: int = 0) -> None:
    """Overwrite each tensor on every worker with worker `src`'s values."""
    if get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in tensors:
            dist.broadcast(tensor.data, src=src)


def gather_strings(value: str) -> list[str]:
    """Every worker's `value`, in rank order."""
    if get_world_size() == 1:
        return [value]
    gathered: list[str] = [""] * get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def _buckets(tensors: Iterable[torch.Tensor], cap_bytes: int) -> Iterator[list[torch.Tensor]]:
    bucket: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        # A new bucket also starts at a dtype change: torch.cat needs one dtype.
        if bucket and (size + nbytes > cap_bytes or tensor.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(tensor)
        size += nbytes
    if bucket:
        yield bucket
