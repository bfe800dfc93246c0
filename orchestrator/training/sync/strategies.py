"""Gradient synchronisation strategies: how k workers agree on one gradient.

Every strategy turns each worker's gradient of its *local* loss into the
*sum* over workers. The training loop scales the local loss by
1 / global_batch_size, so that sum is exactly the mean gradient over the
global batch, the one a single device would compute, whatever the shard
sizes are. Each strategy also counts the seconds it spends communicating.

`scratch` and `bucketed` are given their transport when built
(`make_transport`): the process group's collective (gloo, NCCL), or on CPU
workers that share a node, the node's shared memory (shm_allreduce.py).
`sharded` sums each worker's part only, and updates it (sharded.py).
`root` is the book's own allreduce, funnelled through worker 0; `delayed`
sums each step's gradient while the next step computes and applies it one
step late (13.6, exercise 3): a different optimizer, one-step-delayed SGD.
"""

import inspect
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from orchestrator.training.sync.collectives import (allreduce_, flat_buckets, get_world_size,
                                                    root_allreduce_, views_like, wait_busy)
from orchestrator.records import ROOT_FUNNEL
from orchestrator.training.sync.sharded import ParameterShards
from orchestrator.training.sync.shm_allreduce import SharedMemoryAllreduce
from orchestrator.training.timing import DeviceTimer

MEGABYTE = 1024 * 1024


@dataclass(frozen=True)
class Transport:
    """How a strategy sums one tensor over the workers, in place."""

    name: str  # as epochs.csv reports it: "gloo", "nccl", "shared memory" or "none"
    allreduce_: Callable[[torch.Tensor], torch.Tensor]


def root_transport() -> Transport:
    """The book's allreduce over the process group's sends and receives (`root_allreduce_`)."""
    if get_world_size() == 1:
        return Transport("none", root_allreduce_)
    return Transport(f"{dist.get_backend()} {ROOT_FUNNEL}", root_allreduce_)


def group_transport() -> Transport:
    """The process group's own allreduce; "none" without a group, or in a group of one."""
    return Transport(dist.get_backend() if get_world_size() > 1 else "none", allreduce_)


def make_transport(device: torch.device, largest_tensor_bytes: int, *,
                   shared_memory: bool) -> Transport:
    """The node's shared memory if asked for and every worker of this CPU group can
    map it, else the process group's allreduce.

    A collective call when `shared_memory` is set: every worker makes it, with the
    same `largest_tensor_bytes` (the largest tensor the strategy will sum).
    """
    if shared_memory and device.type == "cpu" and get_world_size() > 1:
        reducer = SharedMemoryAllreduce.connect(largest_tensor_bytes)
        if reducer is not None:
            return Transport("shared memory", reducer.allreduce_)
    return group_transport()


class GradientSync:
    """Base: the loop runs forward on `module`, calls `synchronize` after backward,
    `step` for the update and `zero_grad` after it. A strategy times its
    communication with `_timed` (or `self.timer.start`/`stop` where it cannot wrap
    a call); `sync_time_s` reads the total, and setting it (to 0 at each epoch's
    start) resets it."""

    def __init__(self, model: nn.Module, device: torch.device, transport: Transport):
        self.model = model
        self.module: nn.Module = model
        self.device = device
        self.num_workers = get_world_size()
        self.timer = DeviceTimer(device)
        # Seconds backward itself spent blocked on the other workers (ddp's
        # reductions run inside it): not this worker's compute.
        self.backward_wait_s = 0.0
        self.transport = transport.name
        self.allreduce_ = transport.allreduce_

    @property
    def sync_time_s(self) -> float:
        """Seconds communicating since the last reset; on a GPU, waits for its queue once."""
        return self.timer.seconds

    @sync_time_s.setter
    def sync_time_s(self, seconds: float) -> None:
        self.timer.reset(seconds)

    @property
    def in_flight_s(self) -> float:
        """Seconds from each collective's launch to its completion since the last reset of
        `sync_time_s`: more than `sync_time_s` only where communication runs behind
        computation the step does not wait for (`delayed`)."""
        return self.sync_time_s

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)

    def drain(self) -> bool:
        """At an epoch's end: whether a summed gradient is still to be applied (`delayed`'s
        last); if so it is now the one `summed_grads` returns and `step` applies."""
        return False

    def synchronize(self) -> None:
        if self.num_workers == 1:
            return  # nothing to sum
        self._timed(self._reduce, [p.grad for p in self.model.parameters() if p.grad is not None])

    def _timed(self, communicate: Callable, *args) -> None:
        """`communicate(*args)`, its time added to `sync_time_s` (on a GPU, without waiting)."""
        started = self.timer.start()
        communicate(*args)
        self.timer.stop(started)

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def summed_grads(self) -> list[torch.Tensor]:
        """The gradients that `synchronize` summed on this worker: all of them."""
        return [p.grad for p in self.model.parameters() if p.grad is not None]

    def agreed_count(self, count: torch.Tensor) -> torch.Tensor:
        """A count of non-finite `summed_grads`, as every worker reads it: here
        already the same everywhere, every worker holding every summed gradient."""
        return count

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer.state_dict()


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
        for bucket in _buckets(model, bucket_cap_mb):
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


class DelayedSync(GradientSync):
    """Two steps overlapped (13.6, exercise 3): step t's gradient is summed while
    step t+1 computes, and applied one step late.

        synchronize:  wait for step t-1's sum; launch step t's (async_op)
        step:         SGD with step t-1's summed gradient
        drain:        at the epoch's end, wait for the last sum; `step` applies it

    This is one-step-delayed SGD, w_{t+1} = w_t - lr * g_t(w_{t-1}), a
    different optimizer from the others: batch t's gradient is taken at the
    weights before the previous update. Step 0 of each epoch only launches
    its sum (nothing is applied), and the drain applies the epoch's last, so
    every batch's gradient is applied exactly once, with the lr of the step
    that applies it, and an epoch ends, is evaluated and checkpointed with
    nothing in flight: a resumed run starts a fresh pipeline, as each epoch
    does. A mid-epoch evaluation scores the weights with one sum in flight.
    On one worker nothing is summed, but the update is delayed all the same.

    Two sets of flat buffers take turns, as `bucketed`'s one set does: backward
    accumulates into one while the other's sum is in flight. `sync_time_s` is
    the time the step waits (for the previous sum, and to launch this one);
    `in_flight_s` is each sum's launch to completion, most of it hidden behind
    the next step's forward and backward. Its transport is the process
    group's allreduce, whose asynchronous work runs on gloo's own threads.
    """

    def __init__(self, model: nn.Module, device: torch.device, *, bucket_cap_mb: float):
        super().__init__(model, device, group_transport())
        self.params = [p for p in model.parameters() if p.requires_grad]
        buckets = list(_buckets(model, bucket_cap_mb))
        self.buffer_sets = [[torch.zeros(sum(p.numel() for p in bucket), dtype=bucket[0].dtype,
                                         device=device) for bucket in buckets]
                            for _ in range(2)]
        self.bucket_params = buckets
        self.in_flight_timer = DeviceTimer(device)
        self._accumulating = 0  # the buffer set that backward accumulates into
        self._pending: list[torch.futures.Future] | None = None  # the sum in flight
        self._ready = False  # whether the grads hold a summed gradient to apply
        self._point_grads_at(self._accumulating)

    @property
    def in_flight_s(self) -> float:
        return self.in_flight_timer.seconds

    @GradientSync.sync_time_s.setter
    def sync_time_s(self, seconds: float) -> None:
        self.timer.reset(seconds)
        self.in_flight_timer.reset()

    def _point_grads_at(self, index: int) -> None:
        for bucket, buffer in zip(self.bucket_params, self.buffer_sets[index]):
            for param, view in zip(bucket, views_like(bucket, buffer)):
                param.grad = view

    def synchronize(self) -> None:
        started = self.timer.start()
        self._ready = self._wait_pending()
        launched = self._accumulating
        self._pending = [self._launch(buffer) for buffer in self.buffer_sets[launched]]
        # The previous sum (or, at an epoch's first step, zeros) is what `step` applies,
        # and its buffers take the next step's backward once it is applied.
        self._accumulating = 1 - launched
        self._point_grads_at(self._accumulating)
        self.timer.stop(started)

    def _launch(self, buffer: torch.Tensor) -> torch.futures.Future:
        """Start summing `buffer`; the future completes once `in_flight_s` has counted it."""
        started = self.in_flight_timer.start()
        if self.num_workers == 1:
            future = torch.futures.Future()
            future.set_result(None)
        else:
            future = dist.all_reduce(buffer, op=dist.ReduceOp.SUM, async_op=True).get_future()

        def finished(done: torch.futures.Future) -> None:
            self.in_flight_timer.stop(started)
            done.value()  # raises the collective's error, if it failed

        return future.then(finished)

    def _wait_pending(self) -> bool:
        """Wait for the sum in flight, if any; whether there was one."""
        if self._pending is None:
            return False
        for future in self._pending:
            if self.device.type == "cpu":
                # As `wait_busy`: a core blocked in the wait is halted on a virtual machine.
                while not future.done():
                    os.sched_yield()
            future.wait()
        self._pending = None
        return True

    def drain(self) -> bool:
        started = self.timer.start()
        self._ready = self._wait_pending()
        if self._ready:
            # The last sum's buffers hold the gradient to apply, and once `zero_grad`
            # zeroes them, take the next epoch's first backward (the other set is zero).
            self._accumulating = 1 - self._accumulating
            self._point_grads_at(self._accumulating)
        self.timer.stop(started)
        return self._ready

    def summed_grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params] if self._ready else []

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._ready:  # not at an epoch's first step: nothing summed yet
            optimizer.step()

    def zero_grad(self) -> None:
        # In place: the grads are views of the buffer set the next backward fills.
        for param in self.params:
            param.grad.zero_()
        self._ready = False


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

    def _timed_sum_hook(self, _state, bucket: dist.GradBucket
                        ) -> torch.futures.Future[torch.Tensor]:
        started = self.timer.start()
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
    `sharded` takes over `optimizer`'s update, so it needs it.
    """
    if name == "scratch":
        largest_bytes = max(_nbytes(p) for p in model.parameters())
        return ScratchSync(model, device,
                           make_transport(device, largest_bytes, shared_memory=shared_memory))
    if name == "bucketed":
        # The largest of the flat buffers that BucketedSync will make.
        largest_bytes = max(sum(map(_nbytes, bucket)) for bucket in _buckets(model, bucket_cap_mb))
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


def _buckets(model: nn.Module, bucket_cap_mb: float) -> Iterator[list[torch.Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]
    return flat_buckets(params, int(bucket_cap_mb * MEGABYTE))


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
