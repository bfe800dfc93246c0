"""Benchmark: what `--accumulation-steps N` costs a step, and the memory it saves.

The worker's own step (`step.train_batch`: forward and backward per micro-batch,
the sum, SGD; one worker, so nothing is sent) on one CPU thread, at N = 1, 2, 4
and 8 micro-batches of the same global batch, each N on its own copy of the
model, in rounds that rotate their order. Figures per model:
- `step_ms`: the median step at each N; `slowdown`: over N = 1's, measured side
  by side (> 1: accumulation costs that much time).
- `saved_mb`: the most autograd held for backward at once (each micro-batch's
  saved tensors, counted by its own saved-tensor hooks, each storage once, the
  weights left out), measured in one step at each N; `saved_ratio`: over N = 1's
  (the product's claim: about 1/N).

    python bench/accumulation.py [--rounds 4 --steps 3]
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator import ray_fastpath  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training import recipe  # noqa: E402
from orchestrator.training.models import build_model  # noqa: E402
from orchestrator.training.step import train_batch  # noqa: E402
from orchestrator.training.step_metrics import NonFiniteCheck  # noqa: E402
from orchestrator.training.sync.strategies import make_sync  # noqa: E402
from orchestrator.training.timing import DeviceTimer  # noqa: E402

CPU = torch.device("cpu")
STEPS = (1, 2, 4, 8)
# (model, global batch): LeNet at the book's 256; ResNet-18 at 64, a CPU's size.
MODELS = (("lenet", 256), ("resnet18", 64))


class SavedTensors:
    """The bytes autograd saves for backward, held at once at most: each storage
    counted once while saved, parameters left out (they are held anyway)."""

    def __init__(self, model: torch.nn.Module):
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.held: dict[int, int] = {}
        self.most = 0

    def pack(self, tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.weights:
            self.held[key] = storage.nbytes()
            self.most = max(self.most, sum(self.held.values()))
        return tensor, key

    def unpack(self, packed):
        tensor, key = packed
        self.held.pop(key, None)  # read by backward: released after it
        return tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round and N")
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray_fastpath._keep_freed_memory_for_the_next_step()  # as in every worker
    figures = {"threads": 1, "accumulation_steps": list(STEPS)}
    for model_name, batch in MODELS:
        generator = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (batch, 28, 28), dtype=torch.uint8, generator=generator)
        labels = torch.randint(0, 10, (batch,), generator=generator)
        runs = {}
        for steps in STEPS:
            config = TrainConfig(model=model_name, global_batch_size=batch, lr=0.01,
                                 accumulation_steps=steps, memory_format="nchw")
            model = build_model(model_name, seed=0)
            optimizer = recipe.make_optimizer(model.parameters(), config)
            sync = make_sync("scratch", model, CPU, bucket_cap_mb=25.0, shared_memory=False)
            runs[steps] = (config, sync, optimizer, NonFiniteCheck(sync, CPU), DeviceTimer(CPU))

        def step(steps: int) -> None:
            config, sync, optimizer, check, timer = runs[steps]
            assert train_batch(sync, optimizer, images, labels, config, check, timer) is not None

        saved = {}
        for steps in STEPS:
            step(steps)  # warm
            counter = SavedTensors(runs[steps][1].module)
            with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
                step(steps)
            saved[steps] = counter.most
        step_s: dict[int, list[float]] = {steps: [] for steps in STEPS}
        for round_index in range(args.rounds):
            shift = round_index % len(STEPS)
            for steps in STEPS[shift:] + STEPS[:shift]:
                started = time.perf_counter()
                for _ in range(args.steps):
                    step(steps)
                step_s[steps].append((time.perf_counter() - started) / args.steps)
        ms = {steps: median(values) * 1e3 for steps, values in step_s.items()}
        figures[model_name] = {
            "global_batch": batch,
            "step_ms": {str(steps): round(ms[steps], 2) for steps in STEPS},
            "slowdown": {str(steps): round(ms[steps] / ms[1], 3) for steps in STEPS[1:]},
            "saved_mb": {str(steps): round(saved[steps] / 2**20, 2) for steps in STEPS},
            "saved_ratio": {str(steps): round(saved[steps] / saved[1], 3) for steps in STEPS[1:]},
        }
    emit("accumulation", command_line(), figures, append=not args.no_append)


if __name__ == "__main__":
    main()
