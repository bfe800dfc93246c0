"""CUDA's own out-of-memory error: read as one (orchestrator/driver/failures.py;
the marker is torch's text, so a change of it fails here, not in a user's run),
and a test batch the GPU cannot hold scored in halves (training/step.py's
`evaluate`). The CPU allocator's, a CPU stand-in for the halves, and a real
sweep: tests/unit/test_failures.py, tests/unit/test_worker_loop.py,
tests/cluster/test_own_model_on_ray.py. Skipped without a CUDA GPU."""

import re

import pytest
import torch
from ray.train import WorkerGroupError

from orchestrator.driver.failures import RUN, failure_text


def test_cudas_refusal_is_read_as_out_of_memory():
    with pytest.raises(torch.OutOfMemoryError) as refused:
        torch.empty(1 << 45, dtype=torch.uint8, device="cuda")  # 32 TiB: the usual message
    text = failure_text(WorkerGroupError("", {0: refused.value}), RUN, batch_size_per_worker=256)
    assert re.match(r"rank 0: OutOfMemoryError: CUDA out of memory\. Tried to allocate "
                    r"[\d.]+ GiB\. GPU 0 has a total capacity of ", text), text
    assert "(a GPU ran out of memory, training 256 images a step per worker: fewer" in text, text
    torch.cuda.empty_cache()


class _Hungry(torch.nn.Module):
    """LeNet that also holds 256 MiB of the GPU per test image while it scores:
    1000 images ask for 250 GiB, more than any GPU has; a few hundred fit."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model, self.batches, self.scored = model, [], []

    def forward(self, x):
        self.batches.append(len(x))
        held = torch.empty(len(x), 256 << 20, dtype=torch.uint8, device=x.device)
        del held
        self.scored.append(len(x))
        return self.model(x)


def test_a_test_batch_the_gpu_cannot_hold_is_scored_in_halves(fashion_mnist_small):
    """CUDA's own refusal, halved until a batch fits: the same accuracy."""
    from orchestrator.config.options import TrainConfig
    from orchestrator.training import step
    from orchestrator.training.models import build_model

    # fp64: a batch of another size may take another convolution algorithm, and in
    # fp32 (TF32) a near tie could then flip one image's class.
    config = TrainConfig(global_batch_size=64, lr=0.1, test_limit=1000, memory_format="nchw",
                         use_gpu=True, precision="fp64")
    gpu = torch.device("cuda", 0)
    model = build_model("lenet", seed=0).to(gpu, torch.float64)
    images = torch.tensor(fashion_mnist_small.test_images[:1000], device=gpu)
    labels = torch.tensor(fashion_mnist_small.test_labels[:1000], device=gpu)
    whole = step.evaluate(model, images, labels, config, device=gpu)
    hungry = _Hungry(model)
    try:
        assert step.evaluate(hungry, images, labels, config, device=gpu) == whole
    finally:
        torch.cuda.empty_cache()
    assert hungry.batches[0] == 1000 and sum(hungry.scored) == 1000, hungry.batches
    assert max(hungry.scored) < 1000, hungry.scored
