"""`delayed`'s sums in flight: the future each step waits on carries the summed
tensors. On a GPU that is what orders the waiting stream after the sum: torch
records a future's CUDA events only for the tensors of its value, and NCCL's
future completes as the sum is launched, not when it has run."""

import torch

from orchestrator.training.models import build_model
from orchestrator.training.sync import delayed


def test_the_future_a_step_waits_on_carries_its_sum(monkeypatch):
    launched = []

    class Work:  # what dist.all_reduce(async_op=True) returns, completed
        def __init__(self, tensor: torch.Tensor):
            self.tensor = tensor

        def get_future(self) -> torch.futures.Future:
            future = torch.futures.Future()
            future.set_result([self.tensor])
            return future

    def all_reduce(tensor, op, async_op):
        launched.append(tensor)
        return Work(tensor)

    monkeypatch.setattr(delayed.dist, "all_reduce", all_reduce)
    sync = delayed.DelayedSync(build_model("lenet", seed=0), torch.device("cpu"),
                               bucket_cap_mb=0.1)
    sync.num_workers = 2  # as in a group of two
    sync.synchronize()
    assert len(launched) == len(sync._pending) > 1  # a sum per bucket
    for future, buffer in zip(sync._pending, launched):
        (value,) = future.wait()
        assert value is buffer
