"""What a GPU changes in the sync's timing: skipped without one (CI has none);
bench/gpu_check.py runs the whole loop on one."""

import datetime

import pytest
import torch
import torch.distributed as dist

from orchestrator.driver.cluster import free_local_port
from orchestrator.training.models import build_model
from orchestrator.training.sync.strategies import DDPSync
from orchestrator.training.timing import DeviceTimer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
CUDA = torch.device("cuda")


def test_the_timer_queues_events_and_waits_for_the_gpu_only_when_read():
    timer = DeviceTimer(CUDA)
    started = timer.start()
    torch.cuda._sleep(200_000_000)  # a kernel that keeps the GPU busy for a while
    timer.stop(started)
    # Nothing waited for the kernel: the stop event is still queued behind it.
    assert not timer._events[-1][1].query()
    assert timer.seconds > 0.01
    timer.reset()
    assert timer.seconds == 0.0


def test_ddp_times_its_allreduce_on_the_gpu_under_nccl():
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_local_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        model = build_model("resnet18", seed=0).to(CUDA)
        sync = DDPSync(model, CUDA, bucket_cap_mb=25.0)
        sync.module(torch.randn(8, 1, 28, 28, device=CUDA)).sum().backward()
        assert sync.timer._events  # one pair per bucket, not read yet
        # The compute's end: the mark the last bucket queued, taken once.
        assert sync.take_compute_end() is not None and sync.take_compute_end() is None
        assert sync.sync_time_s > 0
    finally:
        dist.destroy_process_group()
