"""A plain torchrun DDP script: the baseline that benchmarks 1 and the GPU check
measure us against.

What a user would write without Ray: torchrun starts the processes, DDP
reduces the gradients, each rank trains on its shard of every global batch.
The data set sits in memory (on the GPU with `--device cuda`) and each batch is
gathered there, as our loop does, so that the data pipeline is no difference.

    torchrun --nproc-per-node 2 bench/torchrun_ddp.py --epochs 3 --batch-size 256
    torchrun --nproc-per-node 1 bench/torchrun_ddp.py --device cuda --model resnet18 \\
        --epochs 3 --batch-size 256 --lr 0.1 --precision bf16 --memory-format channels-last

`--device cuda`: each rank on the GPU of its local rank, under NCCL, cuDNN's
autotuner on; the same options as a trial's (`--precision bf16`: autocast to
bfloat16 with fp32 weights; `--memory-format channels-last`), the step eager
(no CUDA graph: a plain script's). `--ddp orchestrator` swaps plain DDP for our
`ddp` strategy (`DDPSync`, whose comm hook waits for the last bucket by
polling): the same gradient sync as our workers, so that what differs from a
trial of ours is Ray alone. Prints EPOCH_TIMES (training seconds per epoch, the
GPU synchronised at each end) and TEST_ACC (after the last epoch) on rank 0.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training.models import build_model  # noqa: E402
from orchestrator.training.sync.strategies import DDPSync  # noqa: E402

MEMORY_FORMATS = {"nchw": torch.contiguous_format, "channels-last": torch.channels_last}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["lenet", "resnet18"], default="lenet")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch")
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--memory-format", choices=list(MEMORY_FORMATS), default="nchw")
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--test-limit", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--ddp", choices=["plain", "orchestrator"], default="plain")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    on_gpu = args.device == "cuda"
    if on_gpu:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = data.load(args.data_dir, train_limit=args.train_limit, test_limit=args.test_limit)
    images = torch.from_numpy(dataset.train_images.copy()).to(device)
    labels = torch.from_numpy(dataset.train_labels.copy()).to(device)
    memory_format = MEMORY_FORMATS[args.memory_format]
    module = build_model(args.model, seed=0).to(device, memory_format=memory_format)
    if args.ddp == "plain":
        model = DistributedDataParallel(module, device_ids=[device.index] if on_gpu else None)
    else:
        model = DDPSync(module, device, bucket_cap_mb=TrainConfig.bucket_cap_mb).module
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    per_rank = args.batch_size // world
    steps = len(labels) // args.batch_size
    epoch_times = []
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        order = order.to(device)
        if on_gpu:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * args.batch_size + rank * per_rank:
                          step * args.batch_size + (rank + 1) * per_rank]
            x = images[index].unsqueeze(1).float().div_(255).contiguous(
                memory_format=memory_format)
            with torch.autocast(device.type, dtype=torch.bfloat16,
                                enabled=args.precision == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), labels[index].long())
            if args.ddp == "orchestrator":
                loss = loss / world  # DDPSync sums gradients where DDP averages them
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if on_gpu:
            torch.cuda.synchronize(device)
        epoch_times.append(time.perf_counter() - start)
    test_acc = _test_accuracy(module, dataset, device, memory_format, args.precision)
    if rank == 0:
        print("EPOCH_TIMES " + json.dumps(epoch_times), flush=True)
        print(f"TEST_ACC {test_acc:.4f}", flush=True)
    dist.destroy_process_group()


@torch.no_grad()
def _test_accuracy(model, dataset, device, memory_format, precision) -> float:
    """Rank 0's model on the whole test set (every rank holds the same weights)."""
    model.eval()
    images = torch.from_numpy(dataset.test_images.copy()).to(device)
    labels = torch.from_numpy(dataset.test_labels.copy()).to(device)
    correct = 0
    for start in range(0, len(labels), 1024):
        x = images[start:start + 1024].unsqueeze(1).float().div_(255).contiguous(
            memory_format=memory_format)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            correct += int((model(x).argmax(dim=1) == labels[start:start + 1024]).sum())
    return correct / len(labels)


if __name__ == "__main__":
    main()
