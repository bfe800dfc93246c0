"""Benchmark: our 2-worker epoch (`--memory-format auto`) against Ray Train's documented API.

Side A is a trial of ours (`run_trial`, as `experiments/train.py` runs it):
the defaults but `--memory-format auto`. Side B is the same LeNet written the
way Ray's docs and `ray/train/examples/pytorch/torch_fashion_mnist_example.py`
write it: a torch DataLoader that `ray.train.torch.prepare_data_loader` gives a
DistributedSampler, a model wrapped by `ray.train.torch.prepare_model` (DDP),
SGD, `ray.train.report` every epoch, the default NCHW layout. Both train the
book's LeNet (models.py, same init) on the same images (data.py, read from
disk, no download), 2 workers of 1 thread, a global batch of 256 (128 per
worker), lr 0.2, on one embedded Ray, alternating A, B, B, A, ... Each epoch
is timed around its training steps only, evaluation excluded; the first epoch
of every run is dropped. Figure: `ratio_ours_over_ray_train_api`, the median
epoch of ours over theirs (target <= 0.75).

    python bench/ray_train_api.py [--rounds 3 --epochs 3 --train-limit 20480]
"""

import argparse
import os
import sys
import tempfile
import time

import ray
import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402
from orchestrator.training import data  # noqa: E402

TARGET = 0.75
SIDES = ("ours", "ray_train_api")
STATE_TRACKING = "RAY_TRAIN_ENABLE_STATE_TRACKING"


def ray_train_api_loop(config: dict) -> dict:
    """Side B, one worker: Ray Train's documented pattern, nothing of ours but
    the model's definition and the files' reader."""
    import ray.train
    import ray.train.torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from orchestrator.training import data
    from orchestrator.training.models import build_model

    # One thread, as each of our workers has (Ray's OMP_NUM_THREADS for a 1-CPU
    # worker, made explicit so that both sides surely run alike).
    torch.set_num_threads(config["threads"])
    fashion_mnist = data.load(train_limit=config["train_limit"], test_limit=config["test_limit"])

    def dataset(images, labels):
        # Floats once, up front: the fastest a user holding tensors would write
        # (the docs' per-item ToTensor and Normalize cost far more).
        x = torch.from_numpy(images.copy()).unsqueeze(1).float().div_(255)
        return TensorDataset(x, torch.from_numpy(labels.copy()).long())

    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(dataset(fashion_mnist.train_images, fashion_mnist.train_labels),
                   batch_size=config["batch_size_per_worker"], shuffle=True))
    test_loader = ray.train.torch.prepare_data_loader(
        DataLoader(dataset(fashion_mnist.test_images, fashion_mnist.test_labels),
                   batch_size=config["batch_size_per_worker"]))
    model = ray.train.torch.prepare_model(build_model("lenet", seed=0))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    epoch_times_s = []
    for epoch in range(config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        model.train()
        start = time.perf_counter()
        for x, y in train_loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        epoch_times_s.append(time.perf_counter() - start)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in test_loader:
                correct += (model(x).argmax(1) == y).sum().item()
                total += len(y)
        ray.train.report(metrics={"epoch": epoch, "epoch_time_s": epoch_times_s[-1],
                                  "test_acc": correct / total})
    return {"epoch_times_s": epoch_times_s, "threads": torch.get_num_threads(),
            "steps_per_epoch": len(train_loader)}


def run_ray_train_api(args, name: str, storage: str) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # Our run_trial turns Ray Train's state tracking on; a docs user has it off.
    tracking = os.environ.pop(STATE_TRACKING, None)
    try:
        return TorchTrainer(
            ray_train_api_loop,
            train_loop_config={"lr": args.lr, "epochs": args.epochs,
                               "batch_size_per_worker": args.batch_size // args.workers,
                               "threads": 1, "train_limit": args.train_limit,
                               "test_limit": args.test_limit},
            scaling_config=ScalingConfig(num_workers=args.workers),
            run_config=RunConfig(name=name, storage_path=storage)).fit().return_value
    finally:
        if tracking is not None:
            os.environ[STATE_TRACKING] = tracking


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch")
    parser.add_argument("--lr", type=float, default=0.2)
    # 20,480 = 80 global batches: both sides then take 80 full steps an epoch (the
    # sampler's last partial batch would give theirs one more step otherwise).
    parser.add_argument("--train-limit", type=int, default=20_480)
    parser.add_argument("--test-limit", type=int, default=2_000)
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch of every run is dropped")
    config = TrainConfig(model="lenet", num_workers=args.workers,
                         global_batch_size=args.batch_size, lr=args.lr, num_epochs=args.epochs,
                         train_limit=args.train_limit, test_limit=args.test_limit,
                         memory_format="auto")
    dataset = data.load(train_limit=args.train_limit, test_limit=args.test_limit)
    epoch_s: dict[str, list[float]] = {side: [] for side in SIDES}
    ours_chose, theirs_threads, theirs_steps = set(), set(), set()
    with tempfile.TemporaryDirectory() as storage:
        ray_cluster.connect(None)
        data_ref = ray.put(dataset)
        for round_index in range(args.rounds):
            for side in SIDES if round_index % 2 == 0 else reversed(SIDES):
                name = f"{side}-{round_index}"
                if side == "ours":
                    history = run_trial(config, data_ref, name=name, storage_path=storage,
                                        max_failures=0).return_value
                    epoch_s[side] += [row["epoch_time_s"] for row in history[1:]]
                    ours_chose |= {row["memory_format"] for row in history}
                else:
                    returned = run_ray_train_api(args, name, storage)
                    epoch_s[side] += returned["epoch_times_s"][1:]
                    theirs_threads.add(returned["threads"])
                    theirs_steps.add(returned["steps_per_epoch"])
        ray.shutdown()
    ratio = median(epoch_s["ours"]) / median(epoch_s["ray_train_api"])
    emit("ray_train_api", command_line(), {
        "workers": args.workers, "global_batch_size": args.batch_size, "lr": args.lr,
        "epochs": args.epochs, "rounds": args.rounds, "train_limit": args.train_limit,
        "epochs_measured_each": len(epoch_s["ours"]),
        "ours_epoch_s": median(epoch_s["ours"]),
        "ray_train_api_epoch_s": median(epoch_s["ray_train_api"]),
        "ratio_ours_over_ray_train_api": ratio,
        "target": f"<= {TARGET}", "target_met": ratio <= TARGET,
        "ours_sync": config.sync, "ours_memory_format": "/".join(sorted(ours_chose)),
        "ours_steps_per_epoch": config.steps_per_epoch,
        "ray_train_api_steps_per_epoch": "/".join(map(str, sorted(theirs_steps))),
        "ray_train_api_threads": "/".join(map(str, sorted(theirs_threads))),
        "torch": torch.__version__, "ray": ray.__version__,
    }, append=not args.no_append)


if __name__ == "__main__":
    main()
