"""Benchmark: one training step on a GPU, the candidates of issue 38 (item 5) measured, not assumed.

ResNet-18 (the book's 13.6 network) and LeNet (13.5) at the book's batch of 256,
on Fashion-MNIST-shaped inputs (random pixels and labels: a step's time does not
depend on them), each way of running the step timed with CUDA events:

- `eager`: forward, loss, backward, SGD (torch's default, foreach) as the book writes it;
- `fused`: SGD with `fused=True` (one kernel for every parameter's update);
- `bf16_cl`: the forward under bfloat16 autocast, channels-last;
- `graph`: the whole step (batch gather, forward, backward, SGD, foreach) captured once as
  a CUDA graph and replayed, which removes the host's per-kernel launches;
- `graph_bf16_cl`: both; `graph_b512`: the graph at batch 512 (does the chip have room?);
- `project`, `project_bf16`: the project's own loop (`run_training`, one worker, no
  Ray; on a GPU its step a CUDA graph since 2026-11-27) for two epochs on the same
  random data in fp32 and in bf16, its second epoch per step: what the product pays
  beside the plain step.

The figure per way is the median of `--repeats` timings of `--steps` steps each,
after `--warmup` steps (cuDNN's search and the allocator's growth). Targets
(issue 38): ResNet-18 at <= 1.5 s/epoch is 6.4 ms a step (234 steps); LeNet at
<= 0.2 s/epoch is 0.85 ms a step.

    python bench/gpu_step.py [--out DIR] [--models resnet18,lenet] [--no-append]
    python bench/gpu_step.py --device cpu --steps 2 --repeats 1 --warmup 1 --no-append   # smoke

Without CUDA and without `--device cpu` it says so in one line and exits 0.
On a CPU the graph ways are skipped (CUDA graphs need CUDA) and nothing is appended.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit  # noqa: E402

from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training import data as data_module  # noqa: E402
from orchestrator.training.loop import run_training  # noqa: E402
from orchestrator.training.recipe import model_of  # noqa: E402
from orchestrator.training.step import to_model_input  # noqa: E402

NAME = "gpu_step"
BATCH = 256
STEPS_PER_EPOCH = 60_000 // BATCH
TARGET_EPOCH_S = {"resnet18": 1.5, "lenet": 0.2}
LRS = {"resnet18": 0.1, "lenet": 0.2}
WAYS = ("eager", "fused", "bf16_cl", "graph", "graph_bf16_cl", "graph_b512", "project",
        "project_bf16")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,lenet")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default=None, help="also write the record to DIR/gpu_step.jsonl")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args(argv)
    for name, given, known in (("model", args.models, TARGET_EPOCH_S), ("way", args.ways, WAYS)):
        unknown = sorted(set(given.split(",")) - set(known))
        if unknown:
            parser.error(f"unknown {name}(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return args


class Synthetic:
    """Fashion-MNIST's shapes and dtypes on the device: 60,000 uint8 28x28 images."""

    def __init__(self, device, n=60_000, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8,
                                    generator=generator).to(device)
        self.labels = torch.randint(0, 10, (n,), generator=generator).to(device)


def make_step(model_name, way, device, synthetic, batch):
    """A zero-argument callable running one step of `way`, and its model."""
    config = TrainConfig(model=model_name, global_batch_size=batch, lr=LRS[model_name],
                         num_epochs=1)
    model = model_of(config).to(device)
    channels_last = way.endswith("_cl")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    bf16 = "bf16" in way
    fused = way == "fused"  # in a graph the launches are gone: foreach, the default
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr,
                                **({"fused": True} if fused and device.type == "cuda" else {}))
    index = torch.arange(batch, device=device)  # a static buffer: the graph reads it

    def body():
        x = to_model_input(synthetic.images[index])
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), synthetic.labels[index])
        loss.backward()
        optimizer.step()
        return loss

    offset = [0]

    def next_batch():
        offset[0] = (offset[0] + batch) % (len(synthetic.labels) - batch)
        index.copy_(torch.arange(offset[0], offset[0] + batch, device=device))

    if not way.startswith("graph"):
        def step():
            next_batch()
            optimizer.zero_grad(set_to_none=True)
            body()
        return step
    # PyTorch's whole-network capture (docs, "CUDA Graphs"): warm up on a side
    # stream, gradients None before capture so backward allocates them in the
    # graph's pool, then replay with new indices copied into the static buffer.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body()

    def replay():
        next_batch()
        graph.replay()
    return replay


def time_steps(step, device, steps, repeats, warmup):
    for _ in range(warmup):
        step()
    timings = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(steps):
                step()
            stop.record()
            stop.synchronize()
            timings.append(start.elapsed_time(stop) / steps)
        else:
            began = time.perf_counter()
            for _ in range(steps):
                step()
            timings.append((time.perf_counter() - began) * 1000 / steps)
    return statistics.median(timings), timings


def project_step_ms(model_name, device, synthetic, precision="fp32"):
    """The project's loop for two epochs on the random data: its second epoch per step."""
    images = synthetic.images.cpu().numpy()
    labels = synthetic.labels.to(torch.uint8).cpu().numpy()
    dataset = data_module.Images(images, labels, images[:2000], labels[:2000])
    config = TrainConfig(model=model_name, global_batch_size=BATCH, lr=LRS[model_name],
                         num_epochs=2, use_gpu=device.type == "cuda", precision=precision,
                         train_limit=len(labels) if device.type == "cuda" else 4 * BATCH)
    history = run_training(config, dataset, device=device, report=lambda *_: None)
    last = history[-1]
    return {"ms": 1000 * last["epoch_time_s"] / config.steps_per_epoch,
            "epoch_s": last["epoch_time_s"], "memory_format": last["memory_format"],
            "step_graph": last["step_graph"]}


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_step: no CUDA device on this machine (torch {torch.__version__}); "
              f"nothing run, nothing written")
        return 0
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    synthetic = Synthetic(device, n=60_000 if device.type == "cuda" else 4 * 512)
    ways = args.ways.split(",")
    figures: dict = {}
    for model_name in args.models.split(","):
        per_way = {}
        for way in ways:
            if way.startswith("graph") and device.type != "cuda":
                continue
            began = time.perf_counter()
            try:
                if way.startswith("project"):
                    result = project_step_ms(model_name, device, synthetic,
                                             "bf16" if way.endswith("bf16") else "fp32")
                else:
                    batch = 512 if way.endswith("b512") else BATCH
                    ms, timings = time_steps(make_step(model_name, way, device, synthetic, batch),
                                             device, args.steps, args.repeats, args.warmup)
                    result = {"ms": ms, "timings_ms": [round(t, 3) for t in timings],
                              "batch": batch}
                result["epoch_s_at_b256"] = result["ms"] * STEPS_PER_EPOCH / 1000 * (
                    BATCH / result.get("batch", BATCH))
            except Exception as error:  # recorded: the other ways still count
                result = {"error": f"{type(error).__name__}: {error}"[:300]}
            result["seconds"] = round(time.perf_counter() - began, 1)
            per_way[way] = result
            print(f"{model_name} {way}: {json.dumps(result)}", flush=True)
        figures[model_name] = per_way
    record = emit(NAME, command_line(), {
        "device_name": (torch.cuda.get_device_name() if device.type == "cuda" else "cpu"),
        "torch": torch.__version__, "batch": BATCH,
        "ms_is": "median over repeats of the mean step in ms (CUDA events)",
        "targets_epoch_s": TARGET_EPOCH_S, **figures},
        append=not args.no_append and device.type == "cuda")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_step.jsonl").write_text(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
