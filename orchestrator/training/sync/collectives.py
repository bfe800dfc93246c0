"""Collective helpers over torch.distributed, the identity without a process group,
and the flat buffers they sum.

Ray Train creates the process group (gloo on CPUs, NCCL on GPUs); nothing
here creates one. With no group, or a group of one, every collective returns
its input unchanged, so the training loop also runs in a single process.
"""

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.distributed as dist


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def process_group_backend() -> str:
    """The group's backend (nccl, gloo); "none" without a group, or in a group of one."""
    return str(dist.get_backend()) if get_world_size() > 1 else "none"


def allreduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all workers, in place: every worker ends with the sum.

    This is the book's `allreduce`, with the copying between devices done by
    the communication backend instead of by hand.
    """
    if get_world_size() > 1:
        wait_busy(dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True), tensor.device)
    return tensor


def root_allreduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all workers as the book's `allreduce` does, in place:
    worker 0 receives every other worker's copy and adds it, in rank order,
    then sends the sum back to each in turn. Worker 0 moves 2(k-1) copies, the
    others 2; a ring moves 2(k-1)/k copies on every worker.

    Blocking sends and receives: gloo completes a point-to-point work only
    inside `wait()`, so polling it (`wait_busy`) would never end.
    """
    num_workers = get_world_size()
    if num_workers == 1:
        return tensor
    # gloo sends only contiguous tensors: a channels-last gradient goes as its memory, flat.
    flat = tensor.view(-1) if tensor.is_contiguous() else _memory_order(tensor)
    with on_host(flat) as moved:
        if get_rank() == 0:
            received = torch.empty_like(moved)
            for source in range(1, num_workers):
                dist.recv(received, src=source)
                moved += received
            for destination in range(1, num_workers):
                dist.send(moved, dst=destination)
        else:
            dist.send(moved, dst=0)
            dist.recv(moved, src=0)
    return tensor


def staged_through_host(tensor: torch.Tensor) -> bool:
    """Whether a call on `tensor` goes through host memory here: a CUDA tensor in a
    gloo group (GPU workers that share a device, --gpus-per-worker). gloo's
    allreduce and broadcast take CUDA tensors and copy through the host
    themselves; its all-gather into one tensor does not ("The Gloo backend does
    not support `all_gather_into_tensor`", torch's own SyncBatchNorm in
    torch/nn/modules/_functions.py, which gathers a list instead), and its
    reduce-scatter, sends and receives are not relied on to: those calls stage
    their tensor here. The same sums: only where the bytes wait differs. NCCL,
    and CPU tensors, go as they are."""
    return tensor.is_cuda and dist.get_backend() == "gloo"


@contextlib.contextmanager
def on_host(tensor: torch.Tensor):
    """`tensor` itself, or (where `staged_through_host`) a host copy of it that is
    copied back into it on leaving: the calls inside work on what it gives."""
    if not staged_through_host(tensor):
        yield tensor
        return
    host = tensor.detach().to("cpu", copy=True)
    yield host
    tensor.copy_(host)


def _memory_order(tensor: torch.Tensor) -> torch.Tensor:
    """A dense tensor's elements as they lie in memory: a flat view of it."""
    assert tensor.is_contiguous(memory_format=torch.channels_last), list(tensor.stride())
    return tensor.as_strided((tensor.numel(),), (1,), tensor.storage_offset())


def reduce_scatter_(flat: torch.Tensor) -> torch.Tensor:
    """Sum `flat` over the workers, but only worker r's r-th of k equal parts,
    which it receives in place; the other parts keep this worker's own values.

    Returns that part (a view of `flat`). `flat.numel()` must divide by k.
    """
    part = flat.view(get_world_size(), -1)[get_rank()]
    if get_world_size() > 1:
        with on_host(flat) as moved:
            # In place: the output is the input's own part, which NCCL and gloo allow.
            # Blocking, not `wait_busy`: gloo's reduce-scatter runs inside `wait()`,
            # so polling its work for completion would never end.
            _reduce_scatter(moved.view(get_world_size(), -1)[get_rank()], moved,
                            op=dist.ReduceOp.SUM)
    return part


def all_gather_(flat: torch.Tensor) -> torch.Tensor:
    """Fill every worker's `flat` with each worker r's r-th of k equal parts, in place."""
    if get_world_size() > 1:
        with on_host(flat) as moved:
            part = moved.view(get_world_size(), -1)[get_rank()]
            wait_busy(_all_gather(moved, part, async_op=True), moved.device)
    return flat


# torch 2.14 renamed these two and warns at every call under the old names.
_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


# Lockstep workers arrive within milliseconds of each other: a wait spins that
# long (a blocked core's wake-up would cost more), then blocks, so a long wait
# (bytes crossing a slow link) leaves the core to whoever shares it.
SPIN_S = 0.02


def wait_busy(work: dist.Work, device: torch.device) -> None:
    """Wait for an asynchronous collective, busily for up to `SPIN_S`, then blocked.

    On a virtual machine a core blocked in gloo's wait is halted, and the
    message that ends the wait must first wake it; `sched_yield` between
    polls still hands the core to any other ready thread
    (bench/notes/sync_strategies.md). A wait past `SPIN_S` blocks: four ranks
    of a ring on 2 cores, each spinning through a whole 50 Mbit/s allreduce,
    took CPU from the ranks moving its bytes (bench/notes/scaling_held_out.md).
    On a GPU the wait only orders the CUDA stream, so it stays as it is.
    """
    if device.type == "cpu":
        spin_until(work.is_completed)
    work.wait()  # raises the collective's error, if it failed


def spin_until(done: Callable[[], bool]) -> None:
    """Poll `done`, with `sched_yield` between polls, until it is true or `SPIN_S` has passed."""
    deadline = time.perf_counter() + SPIN_S
    while not done() and time.perf_counter() < deadline:
        os.sched_yield()


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


def flat_buckets(tensors: Iterable[torch.Tensor], cap_bytes: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive groups of tensors of one dtype and at most `cap_bytes` together.

    A tensor larger than the cap gets a group of its own.
    """
    bucket: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        # A new bucket also starts at a dtype change: a flat buffer has one dtype.
        if bucket and (size + nbytes > cap_bytes or tensor.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(tensor)
        size += nbytes
    if bucket:
        yield bucket


def views_like(tensors: Iterable[torch.Tensor], flat: torch.Tensor) -> Iterator[torch.Tensor]:
    """Each tensor's place in `flat`, one after another, laid out in memory as the
    tensor is: channels-last conv weights stay channels-last, so that backward and
    the optimizer see the strides they expect."""
    offset = 0
    for tensor in tensors:
        dense = tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)
        assert dense, f"a tensor of shape {list(tensor.shape)} is not dense"
        yield flat[offset:offset + tensor.numel()].as_strided(tensor.size(), tensor.stride())
        offset += tensor.numel()
