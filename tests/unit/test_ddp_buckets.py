"""ddp keeps each gradient a view of its bucket from step to step: cleared in
place, not set to None, which DDP would copy into the bucket at every step."""

import datetime

import torch
import torch.distributed as dist

from orchestrator.driver.cluster import free_local_port
from orchestrator.training.models import build_model
from orchestrator.training.sync.strategies import DDPSync


def test_ddp_s_gradients_stay_in_its_buckets_and_are_cleared_in_place():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_local_port()}",
                            rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        model = build_model("lenet", seed=0)
        sync = DDPSync(model, torch.device("cpu"), bucket_cap_mb=25.0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        images = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        storages = []
        for _ in range(3):
            sync.module(images).square().mean().backward()
            grads = [param.grad for param in model.parameters()]
            assert all(grad is not None and grad.abs().sum() > 0 for grad in grads)
            storages.append([grad.data_ptr() for grad in grads])
            sync.step(optimizer)
            sync.zero_grad()
            assert all(param.grad is not None and not param.grad.any()
                       for param in model.parameters())
        # The first backward made the views; the later ones wrote into them.
        assert storages[1] == storages[2]
        # One bucket's views: within it, each gradient follows the one before.
        assert len({grad.untyped_storage().data_ptr() for grad in grads}) == 1
    finally:
        dist.destroy_process_group()
