"""What every gradient-sync strategy shares: its transport (how one tensor is
summed over the workers) and the `GradientSync` interface the loop calls.

`scratch` and `bucketed` are given their transport when built
(`make_transport`): the process group's collective (gloo, NCCL), or on CPU
workers that share a node, the node's shared memory (shm_allreduce.py).
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from orchestrator.records import ROOT_FUNNEL
from orchestrator.training.sync.collectives import (allreduce_, flat_buckets, get_world_size,
                                                    process_group_backend, root_allreduce_)
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
    return Transport(process_group_backend(), allreduce_)


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
        # On a GPU, where backward's end also waits for the other workers (ddp's
        # reductions end inside it): a mark queued where its own work ended.
        self._compute_end: torch.cuda.Event | None = None
        self.transport = transport.name
        self.allreduce_ = transport.allreduce_

    def take_compute_end(self) -> "torch.cuda.Event | None":
        """The mark queued where this step's forward and backward ended, if a strategy
        queued one (ddp on a GPU), taken once; else None (the step's own stop)."""
        end, self._compute_end = self._compute_end, None
        return end

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

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Around a backward whose gradients are only accumulated, not yet summed
        (gradient accumulation's micro-batches but the last): nothing to hold back
        where the sum waits for `synchronize`; ddp's runs inside backward."""
        return contextlib.nullcontext()

    @property
    def has_sum(self) -> bool:
        """Whether `step` has a summed gradient to apply: always, but at `delayed`'s
        first step of an epoch."""
        return True

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


def buckets(model: nn.Module, bucket_cap_mb: float) -> Iterator[list[torch.Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]
    return flat_buckets(params, int(bucket_cap_mb * MEGABYTE))


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
