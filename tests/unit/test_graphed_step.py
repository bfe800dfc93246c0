"""Where the training step is captured as a CUDA graph (training/graphed.py), and
what a run records where it is not; the capture itself needs a GPU
(tests/gpu/test_cuda_graph.py)."""

import pytest
import torch

from helpers import run_here
from orchestrator.config.options import TrainConfig
from orchestrator.errors import UserError
from orchestrator.training.graphed import off_reason

GPU = torch.device("cuda", 0)  # only named: nothing here runs on it


@pytest.mark.parametrize("overrides, reason", [
    ({}, None),
    ({"sync": "bucketed"}, None),
    ({"sync": "root"}, None),
    ({"cuda_graph": "off"}, "off: --cuda-graph off"),
    ({"num_workers": 2}, "off: several workers (their sums run eagerly)"),
    ({"sync": "ddp"}, "off: sync ddp"),
    ({"sync": "delayed"}, "off: sync delayed"),
    ({"model": "examples.own_model:cnn"}, "off: your own model (--cuda-graph on captures it)"),
    ({"model": "examples.own_model:cnn", "cuda_graph": "on"}, None),
])
def test_the_step_is_captured_on_one_gpu_with_a_plain_update(overrides, reason):
    assert off_reason(TrainConfig(**overrides), GPU) == reason


def test_never_on_a_cpu_and_the_run_says_so(fashion_mnist_small):
    config = TrainConfig(num_epochs=1, train_limit=2 * 64, test_limit=64, global_batch_size=64)
    assert off_reason(config, torch.device("cpu")) == "off: not a CUDA device (cpu)"
    history, _ = run_here(config, fashion_mnist_small)
    assert history[-1]["step_graph"] == "off: not a CUDA device (cpu)"


def test_an_unknown_choice_is_one_line():
    with pytest.raises(UserError, match="unknown cuda graph 'always'; choose one of auto, on, off"):
        TrainConfig(cuda_graph="always")


def test_a_failed_captures_routing_is_ended_on_its_own_device_and_pool(monkeypatch):
    """Before torch 2.12 a capture whose end failed left the allocator routing to its
    pool (pytorch#180395): `_end_routing` ends it on the step's device, and takes the
    allocator's "not recording" (where torch ended it) and a torch without the call
    as nothing to do. The capture itself: tests/gpu/test_cuda_graph.py."""
    from orchestrator.training import graphed
    calls = []
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool",
                        lambda device, pool: calls.append((device, pool)), raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    graphed._end_routing(torch.device("cuda", 1), (0, 7))
    graphed._end_routing(torch.device("cuda"), (0, 8))
    assert calls == [(1, (0, 7)), (3, (0, 8))]

    def not_recording(device, pool):
        raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", not_recording)
    graphed._end_routing(GPU, (0, 9))
    monkeypatch.delattr(torch._C, "_cuda_endAllocateToPool")
    graphed._end_routing(GPU, (0, 10))
