"""Gradient synchronisation strategies: how k workers agree on one gradient.

Every strategy turns each worker's gradient of its *local* loss into the
*sum* over workers. The training loop scales the local loss by
1 / global_batch_size, so that sum is exactly the mean gradient over the
global batch, the one a single device would compute, whatever the shard
sizes are. Each strategy also counts the seconds it spends communicating.

`scratch` and `bucketed` are given their transport when built (base.py):
the process group's collective (gloo, NCCL), or on CPU workers that share a
node, the node's shared memory (shm_allreduce.py). `sharded` sums each
worker's part only, and updates it (sharded.py). `root` is the book's own
allreduce, funnelled through worker 0; `delayed` (delayed.py) sums each
step's gradient while the next step computes and applies it one step late
(13.6, exercise 3): a different optimizer, one-step-delayed SGD.
"""

import contextlib
import inspect
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from orchestrator.training.sync.base import (GradientSync, Transport, buckets,
                                             group_transport, make_transport, nbytes,
                                             root_transport)
from orchestrator.training.sync.collectives import root_allreduce_, views_like, wait_busy
from orchestrator.training.sync.delayed import DelayedSync
from orchestrator.training.sync.sharded import ParameterShards


class ScratchSync(GradientSync):
    """The book's algorithm in plain sight: one allreduce per parameter tensor.

    The book (13.5) holds every device's copy of a gradient in one process,
    and sums and copies them back itself:

        def allreduce(data):
            for i in range(1, len(data)):
                data[0][:] += data[i].to(data[0].device)
            for i in range(1, len(data)):
                data[i][:] = data[0].to(data[i].device)

    Here each worker is a process holding one copy, and the transport does
    both the summing and the copying back:

        for grad in grads:
            self.allreduce_(grad)
    """

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        for grad in grads:
            self.allreduce_(grad)


class BucketedSync(GradientSync):
    """Gradients live in a few flat, size-capped buffers; one allreduce per buffer.

    Each parameter's `.grad` is a view into its bucket's buffer, so backward
    accumulates straight into the buffers and the reduction copies nothing in
    or out (DDP's `gradient_as_bucket_view`, by hand). Fewer, larger messages
    pay the per-call latency once per bucket rather than once per tensor:
    the book's exercise 3 of 13.5.
    """

    def __init__(self, model: nn.Module, device: torch.device, transport: Transport, *,
                 bucket_cap_mb: float):
        super().__init__(model, device, transport)
        self.buffers: list[torch.Tensor] = []
        for bucket in buckets(model, bucket_cap_mb):
            buffer = torch.zeros(sum(p.numel() for p in bucket), dtype=bucket[0].dtype,
                                 device=device)
            for param, view in zip(bucket, views_like(bucket, buffer)):
                param.grad = view
            self.buffers.append(buffer)

    def zero_grad(self) -> None:
        # Zeroed in place: setting grads to None would detach them from the buffers.
        for buffer in self.buffers:
            buffer.zero_()

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        for buffer in self.buffers:
            self.allreduce_(buffer)


class RootSync(ScratchSync):
    """The book's `allreduce` as written: per parameter tensor, worker 0 sums
    every worker's copy in rank order and sends the sum back to each,

        for i in range(1, len(data)):
            data[0][:] += data[i].to(data[0].device)
        for i in range(1, len(data)):
            data[0].copyto(data[i])

    over the process group's sends and receives (`root_allreduce_`): worker 0
    moves 2(k-1) gradients a step, where a ring's workers move 2(k-1)/k each.
    """

    def __init__(self, model: nn.Module, device: torch.device):
        super().__init__(model, device, root_transport())
        # Under NCCL a pair's first send sets up a communicator of its own (the group
        # is not initialised eagerly: Ray passes no device_id), k-1 of them on worker
        # 0 in turn: one exchange of one element makes them here, outside every timed
        # epoch. Every worker builds its sync at the same point of the loop.
        root_allreduce_(torch.zeros(1, device=device))


class DDPSync(GradientSync):
    """torch DistributedDataParallel: buckets reduced during backward, overlapping it.

    DDP averages gradients by default; a communication hook makes it sum, like
    the other strategies. `sync_time_s` adds up each bucket's allreduce from
    launch to completion, which overlaps backward where a core or a GPU is
    spare (bench/notes/sync_strategies.md): on a GPU, from an event queued
    before the allreduce to one queued by the future's callback, which runs on
    a stream that waits for the allreduce. Its transport is always the
    process group's: DDP reduces on the group's own threads during backward.
    """

    def __init__(self, model: nn.Module, device: torch.device, *, bucket_cap_mb: float):
        super().__init__(model, device, group_transport())
        self._works_in_flight: list[dist.Work] = []
        if dist.is_available() and dist.is_initialized():
            self.module = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=True,
                **_no_forward_buffer_sync())
            self.module.register_comm_hook(state=None, hook=self._timed_sum_hook)

    def synchronize(self) -> None:
        pass  # the reduction already happened inside backward

    def no_sync(self) -> contextlib.AbstractContextManager:
        # DDP's own: backward accumulates into the buckets and reduces nothing.
        if isinstance(self.module, DistributedDataParallel):
            return self.module.no_sync()
        return super().no_sync()

    def zero_grad(self) -> None:
        # In place, in one call: after the first backward each grad is a view of its
        # DDP bucket (gradient_as_bucket_view). A grad set to None comes back from
        # backward as a new tensor, which DDP's reducer copies into the bucket, every
        # gradient at every step (torch's Reducer::mark_variable_ready_dense).
        grads = [param.grad for param in self.model.parameters() if param.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    def _timed_sum_hook(self, _state, bucket: dist.GradBucket
                        ) -> torch.futures.Future[torch.Tensor]:
        started = self.timer.start()
        if bucket.is_last() and self.device.type == "cuda":
            # Every gradient is queued by the last bucket's launch, and backward's end
            # waits on the stream for every sum, the other workers' pace with them:
            # this worker's compute ends here (`take_compute_end`). On a CPU, the
            # wait below is measured and left out instead.
            self._compute_end = started
        work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
        if self.device.type == "cpu":
            self._works_in_flight.append(work)
            if bucket.is_last():
                # Backward is over but for the reductions, which DDP would
                # wait for blocked, its core idle; see `wait_busy`.
                waiting_since = time.perf_counter()
                for in_flight in self._works_in_flight:
                    wait_busy(in_flight, self.device)
                self._works_in_flight.clear()
                self.backward_wait_s += time.perf_counter() - waiting_since

        def finished(future: torch.futures.Future) -> torch.Tensor:
            self.timer.stop(started)
            return future.value()[0]

        return work.get_future().then(finished)


class ShardedSync(GradientSync):
    """Each worker sums, and updates, only its 1/k of the parameters (sharded.py):

        synchronize:  reduce-scatter the gradients
        step:         SGD on this worker's part, then all-gather the parameters

    Every worker holds the whole model between steps, and the checkpoint
    the whole optimizer state, as with the other strategies. Its transport
    is the process group's reduce-scatter and all-gather.
    """

    def __init__(self, model: nn.Module, device: torch.device, optimizer: torch.optim.SGD):
        super().__init__(model, device, group_transport())
        self.shards = ParameterShards(model, optimizer, device)

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        self.shards.reduce_scatter_grads()

    def summed_grads(self) -> list[torch.Tensor]:
        return [self.shards.own_param.grad]

    def agreed_count(self, count: torch.Tensor) -> torch.Tensor:
        # Each worker checked its own part only: the verdict is the sum of theirs.
        total = count.clone()
        if self.num_workers > 1:
            self._timed(self.allreduce_, total)
        return total

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.shards.step(optimizer)
        if self.num_workers > 1:
            self._timed(self.shards.all_gather_params)

    def zero_grad(self) -> None:
        self.shards.zero_grad()

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        return self.shards.full_state_dict(optimizer)


def _no_forward_buffer_sync() -> dict:
    """DDP's option to leave buffers (BatchNorm statistics) per worker in forward,
    as the other strategies do; the loop broadcasts them before evaluation.

    torch 2.15 renamed it and warns at every use of the old name; the new one
    still syncs buffers once at construction, which changes nothing here since
    the loop has already broadcast rank 0's.
    """
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def make_sync(name: str, model: nn.Module, device: torch.device, *,
              bucket_cap_mb: float, shared_memory: bool,
              optimizer: torch.optim.Optimizer | None = None) -> GradientSync:
    """Strategy `name` for `model`, with its transport chosen once, here.

    A collective call (see `make_transport`): every worker makes it.
    `shared_memory` is read by SHARED_MEMORY_SYNCS (records.py) alone.
    `sharded` takes over `optimizer`'s update, so it needs it.
    """
    if name == "scratch":
        largest_bytes = max(nbytes(p) for p in model.parameters())
        return ScratchSync(model, device,
                           make_transport(device, largest_bytes, shared_memory=shared_memory))
    if name == "bucketed":
        # The largest of the flat buffers that BucketedSync will make.
        largest_bytes = max(sum(map(nbytes, bucket)) for bucket in buckets(model, bucket_cap_mb))
        return BucketedSync(model, device,
                            make_transport(device, largest_bytes, shared_memory=shared_memory),
                            bucket_cap_mb=bucket_cap_mb)
    if name == "ddp":
        return DDPSync(model, device, bucket_cap_mb=bucket_cap_mb)
    if name == "sharded":
        return ShardedSync(model, device, optimizer)
    if name == "root":
        return RootSync(model, device)
    if name == "delayed":
        return DelayedSync(model, device, bucket_cap_mb=bucket_cap_mb)
    raise AssertionError(f"unvalidated sync strategy {name!r}")
