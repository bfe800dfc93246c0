"""`--profile-steps` on a GPU (training/profiling.py): the summary counts the
step's kernels and the device's busy time, for an eager step and for one replayed
as a CUDA graph (profiled after its warm-up and capture); the rows are the kernels.

Needs a CUDA GPU: skipped without one (tests/conftest.py); on CPUs:
tests/unit/test_profiling.py.
"""

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from orchestrator.config.options import TrainConfig
from orchestrator.training.loop import run_training

GPU = torch.device("cuda", 0)


@pytest.mark.parametrize("cuda_graph", ["off", "auto"])
def test_a_gpu_profile_counts_kernels_and_the_devices_busy_time(fashion_mnist_small,
                                                                 cuda_graph):
    config = TrainConfig(global_batch_size=256, lr=0.1, num_epochs=1, train_limit=4096,
                         test_limit=500, profile_steps=4, use_gpu=True,
                         memory_format="nchw", cuda_graph=cuda_graph)
    history = run_training(config, fashion_mnist_small, device=GPU, report=lambda *_: None)
    (rank,) = json.loads(history[0]["profile"])
    assert rank["steps"] == 4 and rank["device"] == "cuda:0"
    assert rank["error"] is None, rank["error"]  # kernels recorded, the trace written
    # LeNet's forward, backward and update: tens of kernels a step, whether launched
    # one by one or replayed as a graph; their time a part of the step's.
    assert rank["kernels"] >= 10, rank
    assert 0 < rank["device_busy_ms"] <= rank["step_ms"], rank
    assert rank["nccl_busy_ms"] == 0  # one worker: no NCCL kernel
    # The rows are kernels: no host op and no record_function span among them.
    assert not any(op["op"].startswith(("aten::", "Optimizer.step", "ProfilerStep"))
                   for op in rank["ops"]), rank["ops"]
    device_ms = [op["self_device_ms"] for op in rank["ops"]]
    assert device_ms == sorted(device_ms, reverse=True) and device_ms[0] > 0
    trace = json.load(gzip.open(rank["trace"]))
    assert any(event.get("cat") == "kernel" for event in trace["traceEvents"])
    assert history[0]["step_graph"] == ("on" if cuda_graph == "auto" else "off: --cuda-graph off")
    shutil.rmtree(Path(rank["trace"]).parent)
