"""Benchmark 6: LeNet and ResNet-18 on one GPU, seconds per epoch and test accuracy.

The book's figure for 13.6 is ResNet-18 on one GPU at 13.8 s/epoch, test
accuracy 0.90; the target here is ResNet-18 at <= 3 s/epoch with test
accuracy >= 0.90 after 10 epochs (bf16 and channels-last allowed). Each model
trains with its book setup (the presets d2l-13.5 and d2l-13.6 at one worker)
through the project's own loop, `orchestrator.loop.run_training`, in this
process and without Ray, which the lent GPU machines do not have. Seconds per
epoch count training only, as the book's do, and are the median over the
epochs after the first: the first also pays for cuDNN's algorithm search and
the allocator's growth.

    python bench/gpu.py [--epochs 10] [--precision bf16] [--memory-format channels-last]
                        [--data-dir DIR]
    python bench/gpu.py --device cpu --models lenet --epochs 2 --train-limit 512 --test-limit 200

On a machine without a CUDA device it records that it did not run, and why.
A `--device cpu` run is a smoke test of this script: its line is printed,
never appended to bench/results (nor is any run with `--no-append`).
"""

import argparse
import os
import sys
import typing

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402

from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import MODELS, PRECISIONS, MemoryFormat, TrainConfig  # noqa: E402
from orchestrator.config.presets import PRESETS  # noqa: E402
from orchestrator.records import Status  # noqa: E402
from orchestrator.training.loop import run_training  # noqa: E402

NAME = "gpu"
BOOK_PRESET = {"lenet": "d2l-13.5", "resnet18": "d2l-13.6"}
BOOK_RESNET18 = {"book_resnet18_epoch_s": 13.8, "book_resnet18_test_acc": 0.90}
TARGET_EPOCH_S = 3.0
TARGET_TEST_ACC = 0.90
TARGET_EPOCHS = 10
TARGET = (f"ResNet-18: <= {TARGET_EPOCH_S:g} s/epoch at >= {TARGET_TEST_ACC:.2f} test acc "
          f"after {TARGET_EPOCHS} epochs")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=TARGET_EPOCHS,
                        help="at least 2: the first is warm-up and not timed")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--memory-format", choices=typing.get_args(MemoryFormat), default="auto",
                        help="auto: the faster layout, timed on the GPU (default)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: a smoke test of this script, never appended to the results")
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    parser.add_argument("--data-dir", default=None, help="folder with the Fashion-MNIST files")
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--test-limit", type=int, default=None)
    args = parser.parse_args(argv)
    args.models = args.models.split(",")
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is warm-up and not timed")
    return args


def book_config(model: str, args: argparse.Namespace, device: torch.device) -> TrainConfig:
    preset = PRESETS[BOOK_PRESET[model]]
    return TrainConfig(model=model, global_batch_size=preset["batch_sizes"][0],
                       lr=preset["lrs"][0], num_epochs=args.epochs, train_limit=args.train_limit,
                       test_limit=args.test_limit, precision=args.precision,
                       memory_format=args.memory_format, use_gpu=device.type == "cuda")


def measure(config: TrainConfig, dataset: data.Images, device: torch.device) -> dict:
    """Train one model; its figures, named after it."""
    def print_epoch(metrics: dict, *_) -> None:
        print(f"{config.model} epoch {metrics['epoch']}/{config.num_epochs}: "
              f"{metrics['epoch_time_s']:.2f} s, train loss {metrics['train_loss']:.4f}, "
              f"test acc {metrics['test_acc']:.3f}", flush=True)

    print(f"{config.model}: batch {config.global_batch_size}, lr {config.lr}, "
          f"{config.steps_per_epoch} steps/epoch, {config.num_epochs} epochs", flush=True)
    history = run_training(config, dataset, device=device, report=print_epoch)
    timed = [row["epoch_time_s"] for row in history[1:]]
    figures = {
        "epoch_s": median(timed) if timed else None,
        "first_epoch_s": history[0]["epoch_time_s"],
        "test_acc": history[-1]["test_acc"],
        "epochs_run": len(history),
        "memory_format": history[-1]["memory_format"],  # what auto took, if asked
    }
    if history[-1]["status"] != Status.OK:
        figures["status"] = history[-1]["status"]
    return {f"{config.model}_{key}": value for key, value in figures.items()}


def verdict(figures: dict, args: argparse.Namespace) -> str:
    """Whether ResNet-18 met the target, and if not, by how much."""
    if "resnet18" not in args.models:
        return "not judged: ResNet-18 was not run"
    if args.epochs < TARGET_EPOCHS or args.train_limit or args.test_limit:
        return f"not judged: fewer than {TARGET_EPOCHS} epochs or a subset of the data"
    epoch_s, test_acc = figures["resnet18_epoch_s"], figures["resnet18_test_acc"]
    missed = []
    if figures.get("resnet18_status") or epoch_s is None:
        missed.append(f"the run stopped: {figures.get('resnet18_status')}")
    else:
        if epoch_s > TARGET_EPOCH_S:
            missed.append(f"{epoch_s:.2f} s/epoch > {TARGET_EPOCH_S:g}")
        if test_acc < TARGET_TEST_ACC:
            missed.append(f"test acc {test_acc:.3f} < {TARGET_TEST_ACC:.2f}")
    return "MISSED: " + "; ".join(missed) if missed else "met"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    options = {"precision": args.precision, "memory_format": args.memory_format,
               "epochs": args.epochs}
    if args.device == "cuda" and not torch.cuda.is_available():
        # Recorded, so that the report says it was not measured rather than
        # leaving the benchmark out.
        emit(NAME, command_line(), {
            "ran": False, "reason": f"no CUDA device on this machine (torch {torch.__version__})",
            **options, **BOOK_RESNET18, "target": TARGET,
            "target_met": "not measured: no GPU on this machine"}, append=not args.no_append)
        return
    device = torch.device(args.device)
    dataset = data.load(args.data_dir, train_limit=args.train_limit, test_limit=args.test_limit)
    figures = {}
    for model in args.models:
        figures.update(measure(book_config(model, args, device), dataset, device))
    if "resnet18" in args.models and args.train_limit is None and figures["resnet18_epoch_s"]:
        # The book's epoch is the whole training set: only a whole epoch compares.
        figures["resnet18_speedup_over_book"] = (BOOK_RESNET18["book_resnet18_epoch_s"]
                                                 / figures["resnet18_epoch_s"])
    emit(NAME, command_line(), {
        "ran": True,
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else "cpu (smoke run, not a result)"),
        "torch": torch.__version__, **options,
        "epoch_s_is": "training only, median of epochs 2.. (epoch 1 is warm-up)",
        **figures, **BOOK_RESNET18, "target": TARGET, "target_met": verdict(figures, args),
    }, append=device.type == "cuda" and not args.no_append)


if __name__ == "__main__":
    main()
