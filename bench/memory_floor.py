"""The memory floor the driver counts (orchestrator/training/memory.py) against a
real step's peak, on this machine's CPU and, where there is one, its GPU.

The floor is what a worker's step must hold at the least; the driver refuses a
step whose floor exceeds a node's or a GPU's memory. It must never exceed the
peak (a refusal of a step that fits), and the nearer it is, the more it
catches. The peak is the second step's (SGD with momentum 0.9: its buffers made
by the first), forward, backward, update and the gradients cleared: on the CPU
every tensor live at once as torch's MemTracker counts it, on a GPU
`torch.cuda.max_memory_allocated` (cuDNN's workspaces included). A small vision
transformer layer (`encoder`) is among the models: its attention is counted as
CUDA's fused kernels keep it, less than the CPU's math path holds, so on a CPU
its floor may sit far under the peak, and on a GPU it must still sit under it.
So is an LSTM over the image's rows (`recurrent`): counted as cuDNN's backward
reads it (input, initial states, output sequence), not the CPU's workspace.

    python bench/memory_floor.py [--out DIR] [--cuda-only]   # DIR: a lent GPU's files
"""

import argparse
import json
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit  # noqa: E402

from orchestrator.training.memory import measure_floor  # noqa: E402
from orchestrator.training.models import build_model  # noqa: E402

NAME = "memory_floor"
MODELS = {"lenet": (1, 28, 28), "resnet18": (1, 28, 28),
          "torchvision.models:resnet18": (3, 64, 64), "memory_floor:encoder": (1, 28, 28),
          "memory_floor:recurrent": (1, 28, 28)}
BATCH_SIZES = {"cpu": (32, 256), "cuda": (32, 256, 1024)}


def encoder(num_classes: int, input_shape: tuple) -> nn.Module:
    """A vision transformer's layer: 196 tokens, one per 2x2 patch, of 64 values,
    4 heads (nn.MultiheadAttention, through F.scaled_dot_product_attention)."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 64, kernel_size=2, stride=2), nn.Flatten(2),
        Transposed(), nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
        nn.Flatten(), nn.Linear(64 * (height // 2) * (width // 2), num_classes))


def recurrent(num_classes: int, input_shape: tuple) -> nn.Module:
    """Two LSTM layers of 128 over an image's rows, classified from the last step."""
    return nn.Sequential(nn.Flatten(1, 2), Recurrent(input_shape[2], 128),
                         nn.Linear(128, num_classes))


class Recurrent(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(width, hidden, num_layers=2, batch_first=True)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.lstm(rows)[0][:, -1]


class Transposed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)


def peak_bytes(name: str, input_shape: tuple, batch_size: int, precision: str,
               device: torch.device) -> int:
    """The peak of the second SGD step of `name` at `batch_size` images."""
    model = build_model(name, seed=0, num_classes=10, input_shape=input_shape).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch_size, *input_shape, device=device)
    labels = torch.arange(batch_size, device=device) % 10

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    from torch.distributed._tools.mem_tracker import MemTracker
    tracker = MemTracker()
    tracker.track_external(model, optimizer, images, labels)
    with tracker:
        step()
    return tracker.get_tracker_snapshot("peak")[device]["Total"]


def rows_on(device: torch.device) -> list[dict]:
    rows = []
    for name, input_shape in MODELS.items():
        floor = measure_floor(build_model(name, seed=0, num_classes=10, input_shape=input_shape),
                              input_shape, 10)
        for batch_size in BATCH_SIZES[device.type]:
            for precision in ("fp32", "bf16"):
                try:
                    peak = peak_bytes(name, input_shape, batch_size, precision, device)
                except RuntimeError as error:  # a kernel this device lacks (cuDNN's RNN in bf16?)
                    rows.append({"device": device.type, "model": name,
                                 "batch_size": batch_size, "precision": precision,
                                 "error": f"{type(error).__name__}: {str(error)[:200]}"})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                need = floor.worker_bytes(batch_size, precision, 0.9)
                rows.append({"device": device.type, "model": name, "batch_size": batch_size,
                             "precision": precision, "floor_mb": round(need / 1e6, 2),
                             "peak_mb": round(peak / 1e6, 2),
                             "floor_over_peak": round(need / peak, 3)})
                print(json.dumps(rows[-1]), flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the record here (a lent GPU's files)")
    parser.add_argument("--cuda-only", action="store_true",
                        help="the GPU's rows alone (a lent GPU's minutes are few; the CPU's "
                             "are measured here)")
    args = parser.parse_args(argv)
    if args.cuda_only and not torch.cuda.is_available():
        print("no CUDA device here: --cuda-only has nothing to measure", file=sys.stderr)
        return 2
    devices = ([] if args.cuda_only else [torch.device("cpu")]) + (
        [torch.device("cuda")] if torch.cuda.is_available() else [])
    rows = [row for device in devices for row in rows_on(device)]
    measured = [row for row in rows if "error" not in row]
    figures = {"devices": [device.type for device in devices],
               **({"device_name": torch.cuda.get_device_name()} if torch.cuda.is_available()
                  else {}),
               "floor_under_peak_everywhere": all(row["floor_over_peak"] <= 1
                                                  for row in measured),
               "min_floor_over_peak": min(row["floor_over_peak"] for row in measured),
               "max_floor_over_peak": max(row["floor_over_peak"] for row in measured),
               "rows_not_measured": len(rows) - len(measured),
               "rows": rows}
    emit(NAME, command_line(), figures, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
