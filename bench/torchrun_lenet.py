"""A plain torchrun DDP script: the baseline that benchmark 1 measures us against.

What a user would write without Ray: torchrun starts the processes, DDP
reduces the gradients, each rank trains on its shard of every global batch.

    torchrun --nproc-per-node 2 bench/torchrun_lenet.py --epochs 3 --batch-size 256

`--ddp orchestrator` swaps plain DDP for our `ddp` strategy (`DDPSync`,
whose comm hook waits for the last bucket by polling): the same gradient
sync as our workers, so that what differs from a trial of ours is Ray alone.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch")
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--ddp", choices=["plain", "orchestrator"], default="plain")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = data.load(train_limit=args.train_limit, test_limit=1)
    images = torch.from_numpy(dataset.train_images.copy())
    labels = torch.from_numpy(dataset.train_labels.copy())
    if args.ddp == "plain":
        model = DistributedDataParallel(build_model("lenet", seed=0))
    else:
        model = DDPSync(build_model("lenet", seed=0), torch.device("cpu"),
                        bucket_cap_mb=TrainConfig.bucket_cap_mb).module
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    per_rank = args.batch_size // world
    steps = len(labels) // args.batch_size
    epoch_times = []
    for epoch in range(args.epochs):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * args.batch_size + rank * per_rank:
                          step * args.batch_size + (rank + 1) * per_rank]
            x = images[index].unsqueeze(1).float().div_(255)
            loss = F.cross_entropy(model(x), labels[index].long())
            if args.ddp == "orchestrator":
                loss = loss / world  # DDPSync sums gradients where DDP averages them
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        epoch_times.append(time.perf_counter() - start)
    if rank == 0:
        print("EPOCH_TIMES " + json.dumps(epoch_times), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
