"""The memory floor the driver counts on its CPU (training/memory.py) against a
real step on CUDA: never above the second SGD step's `max_memory_allocated`
(the weights, the momentum, the batch and every tensor of forward, backward and
the update), since a floor above it would refuse a run that fits. The book's
models, and the layers whose CPU kernels keep more than CUDA's and are counted
as CUDA keeps them: attention (fused kernels), dropout (a mask of bytes) and
an LSTM (what cuDNN's backward reads). bench/memory_floor.py records how near
the floor comes. Needs a CUDA GPU: skipped without one (tests/conftest.py).
"""

import gc

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.training.memory import measure_floor
from orchestrator.training.models import build_model

GPU = torch.device("cuda", 0)
BATCH_SIZE = 256
IMAGE = (1, 28, 28)


class _Rows(nn.Module):
    """An image's rows as a sequence: a 2-layer LSTM, classified from its last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(28, 64, num_layers=2, batch_first=True)
        self.classify = nn.Linear(64, 10)

    def forward(self, images):
        return self.classify(self.lstm(images.flatten(1, 2))[0][:, -1])


class _Patches(nn.Module):
    """196 patches of 2x2 as tokens of 64 values through torch's transformer layer
    (attention through F.scaled_dot_product_attention, dropout 0.1)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(1, 64, kernel_size=2, stride=2)
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.classify = nn.Linear(64 * 196, 10)

    def forward(self, images):
        tokens = self.embed(images).flatten(2).transpose(1, 2)
        return self.classify(self.layer(tokens).flatten(1))


MODELS = {
    "lenet": lambda: build_model("lenet", seed=0, num_classes=10, input_shape=IMAGE),
    "resnet18": lambda: build_model("resnet18", seed=0, num_classes=10, input_shape=IMAGE),
    "dropout": lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                                     nn.Dropout(0.5), nn.Linear(1024, 10)),
    "transformer layer": _Patches,
    "lstm": _Rows,
}


# The LSTM in fp32 alone: whether cuDNN's RNN takes bfloat16 under autocast is
# bench/memory_floor.py's to find out, not a reason for this test to fail.
CASES = [(name, precision) for name in MODELS for precision in ("fp32", "bf16")
         if (name, precision) != ("lstm", "bf16")]


@pytest.mark.parametrize("name, precision", CASES)
def test_the_floor_is_under_a_cuda_step_s_peak(name, precision):
    floor = measure_floor(MODELS[name](), IMAGE, 10).worker_bytes(BATCH_SIZE, precision, 0.9)
    gc.collect()  # nothing of an earlier test freed during this step: `before` stays
    torch.cuda.synchronize(GPU)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(GPU)  # what earlier tests left: not this step's
    model = MODELS[name]().to(GPU)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(BATCH_SIZE, *IMAGE, device=GPU)
    labels = torch.arange(BATCH_SIZE, device=GPU) % 10

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    step()  # the momentum buffers are made here, cuDNN's algorithms chosen
    torch.cuda.synchronize(GPU)
    torch.cuda.reset_peak_memory_stats(GPU)
    step()
    torch.cuda.synchronize(GPU)
    peak = torch.cuda.max_memory_allocated(GPU) - before
    assert 0 < floor <= peak, (floor, peak)
