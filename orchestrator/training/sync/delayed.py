"""`delayed`: two steps overlapped (13.6, exercise 3), one-step-delayed SGD."""

import torch
import torch.distributed as dist
from torch import nn

from orchestrator.training.sync.base import GradientSync, buckets, group_transport
from orchestrator.training.sync.collectives import spin_until, views_like
from orchestrator.training.timing import DeviceTimer


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
        bucket_params = list(buckets(model, bucket_cap_mb))
        self.buffer_sets = [[torch.zeros(sum(p.numel() for p in bucket), dtype=bucket[0].dtype,
                                         device=device) for bucket in bucket_params]
                            for _ in range(2)]
        self.bucket_params = bucket_params
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

        def finished(done: torch.futures.Future) -> list[torch.Tensor] | None:
            self.in_flight_timer.stop(started)
            # Raises the collective's error, if it failed. Returned, the summed
            # tensors make the child future CUDA-aware: torch records its events only
            # for the tensors of its value, and without them `wait()` would not order
            # the current stream after the sum (NCCL's future completes at launch).
            return done.value()

        return future.then(finished)

    def _wait_pending(self) -> bool:
        """Wait for the sum in flight, if any; whether there was one."""
        if self._pending is None:
            return False
        for future in self._pending:
            if self.device.type == "cpu":
                spin_until(future.done)  # as `wait_busy`
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

    @property
    def has_sum(self) -> bool:
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
