"""Gradient synchronisation strategies: how k workers agree on one gradient.

Every strategy turns each worker's gradient of its *local* loss into the
*sum* over workers. The training loop scales the local loss by
1 / global_batch_size, so that sum is exactly the mean gradient over the
global batch, the one a single device would compute, whatever the shard
sizes are. Each strategy also counts the seconds it spends communicating.
"""

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from orchestrator.collectives import allreduce_, allreduce_bucketed_

MEGABYTE = 1024 * 1024


class GradientSync:
    """Base: `module` is what the loop runs forward on, `synchronize` runs after backward."""

    def __init__(self, model: nn.Module, device: torch.device):
        self.model = model
        self.module: nn.Module = model
        self.device = device
        self.sync_time_s = 0.0

    def synchronize(self) -> None:
        _wait_for(self.device)
        start = time.perf_counter()
        self._reduce([p.grad for p in self.model.parameters() if p.grad is not None])
        # On a GPU the collective returns before it finishes: wait, to time it honestly.
        _wait_for(self.device)
        self.sync_time_s += time.perf_counter() - start

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        raise NotImplementedError


class ScratchSync(GradientSync):
    """The book's algorithm in plain sight: one allreduce per parameter tensor."""

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        for grad in grads:
            allreduce_(grad)


class BucketedSync(GradientSync):
    """All gradients flattened into a few size-capped buffers, one allreduce each."""

    def __init__(self, model: nn.Module, device: torch.device, *, bucket_cap_mb: float):
        super().__init__(model, device)
        self.bucket_cap_bytes = int(bucket_cap_mb * MEGABYTE)

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        allreduce_bucketed_(grads, bucket_cap_bytes=self.bucket_cap_bytes)


class DDPSync(GradientSync):
    """torch DistributedDataParallel: buckets reduced during backward, overlapping it.

    DDP averages gradients by default; a communication hook makes it sum, like
    the other strategies. `sync_time_s` adds up each bucket's allreduce from
    launch to completion, most of which is hidden behind backward.
    """

    def __init__(self, model: nn.Module, device: torch.device, *, bucket_cap_mb: float):
        super().__init__(model, device)
        if dist.is_available() and dist.is_initialized():
            self.module = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb,
                # Buffers (BatchNorm statistics) stay per worker as in the other
                # strategies; the loop broadcasts them before evaluation.
                broadcast_buffers=False, gradient_as_bucket_view=True)
            self.module.register_comm_hook(state=None, hook=self._timed_sum_hook)

    def synchronize(self) -> None:
        pass  # the reduction already happened inside backward

    def _timed_sum_hook(self, _state, bucket: dist.GradBucket
                        ) -> torch.futures.Future[torch.Tensor]:
        start = time.perf_counter()
        work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)

        def finished(future: torch.futures.Future) -> torch.Tensor:
            self.sync_time_s += time.perf_counter() - start
            return future.value()[0]

        return work.get_future().then(finished)


def make_sync(name: str, model: nn.Module, device: torch.device, *,
              bucket_cap_mb: float) -> GradientSync:
    if name == "scratch":
        return ScratchSync(model, device)
    if name == "bucketed":
        return BucketedSync(model, device, bucket_cap_mb=bucket_cap_mb)
    if name == "ddp":
        return DDPSync(model, device, bucket_cap_mb=bucket_cap_mb)
    raise AssertionError(f"unvalidated sync strategy {name!r}")


def _wait_for(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
