"""Benchmark 7: everything a GPU changes, run once on one GPU and recorded.

On a machine with a CUDA GPU: LeNet and ResNet-18 with their book setups
(the presets d2l-13.5 and d2l-13.6 at one worker) for the book's 10 epochs,
in fp32 and in bf16 with channels-last, each with the `bucketed` sync (its
gradient views in the parameters' layout) and `ddp` (its allreduce under
NCCL, timed by CUDA events in its hook). Each run is a 1-worker Ray Train
trial under NCCL when Ray is importable and starts; otherwise this says why
and runs the loop alone, in this process. One record goes to
bench/results/gpu_check.jsonl: the device, and per run the seconds per epoch
(training only, median of epochs 2..), test accuracy, sync seconds per
epoch, peak GPU memory and the path taken.

Without a GPU it says so in one line and exits 0, recording nothing.

    python bench/gpu_check.py [--data-dir DIR] [--epochs 10] [--models lenet,resnet18] [--syncs bucketed,ddp]
"""

import argparse
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit, median  # noqa: E402
from gpu import BOOK_PRESET, BOOK_RESNET18, TARGET, TARGET_EPOCH_S, TARGET_EPOCHS, TARGET_TEST_ACC  # noqa: E402

from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import MODELS, SYNC_STRATEGIES, TrainConfig  # noqa: E402
from orchestrator.config.presets import PRESETS  # noqa: E402
from orchestrator.training.loop import run_training  # noqa: E402

NAME = "gpu_check"
VARIANTS = {"fp32": dict(precision="fp32", memory_format="nchw"),
            "bf16_channels_last": dict(precision="bf16", memory_format="channels-last")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=TARGET_EPOCHS)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--syncs", default="bucketed,ddp", help="comma-separated")
    parser.add_argument("--data-dir", default=None, help="folder with the Fashion-MNIST files")
    args = parser.parse_args(argv)
    args.models, args.syncs = args.models.split(","), args.syncs.split(",")
    for given, known in ((args.models, MODELS), (args.syncs, SYNC_STRATEGIES)):
        if set(given) - set(known):
            parser.error(f"unknown {', '.join(sorted(set(given) - set(known)))}; "
                         f"choose from {', '.join(known)}")
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is warm-up and not timed")
    return args


def ray_trial_runner(dataset: data.FashionMNIST, storage: str):
    """A function running a config as a 1-worker Ray Train trial; else why not."""
    try:
        import ray

        from orchestrator.driver import cluster
        from orchestrator.driver.trial import run_trial
        cluster.connect(None)
        data_ref = ray.put(dataset)
    except Exception as error:  # whatever stops Ray there, the loop's figures still count
        return None, f"Ray unavailable ({type(error).__name__}: {error}); the loop ran alone"

    def run(config: TrainConfig) -> list[dict]:
        name = f"gpu-check-{config.model}-{config.precision}-{config.sync}-{time.time_ns()}"
        return run_trial(config, data_ref, name=name, storage_path=storage,
                         max_failures=0).return_value
    return run, "1-worker Ray Train trial, NCCL"


def loop_runner(dataset: data.FashionMNIST):
    def run(config: TrainConfig) -> list[dict]:
        return run_training(config, dataset, device=torch.device("cuda"),
                            report=lambda *_: None)
    return run


def figures(history: list[dict]) -> dict:
    timed = history[1:]
    return {
        "epoch_s": median([row["epoch_time_s"] for row in timed]) if timed else None,
        "first_epoch_s": history[0]["epoch_time_s"],
        "test_acc": history[-1]["test_acc"],
        "sync_s_per_epoch": median([row["sync_time_s"] for row in timed]) if timed else None,
        "peak_memory_mb": max(row["peak_memory_mb"] or 0 for row in history),
        "epochs_run": len(history), "status": history[-1]["status"],
        "transport": history[-1]["transport"],
    }


def verdict(runs: dict, epochs: int) -> str:
    """Whether the best ResNet-18 run met the target."""
    resnet = {key: run for key, run in runs.items() if key.startswith("resnet18")}
    if not resnet or epochs < TARGET_EPOCHS:
        return f"not judged: ResNet-18 not run for {TARGET_EPOCHS} epochs"
    key, best = min(resnet.items(), key=lambda item: item[1]["epoch_s"] or float("inf"))
    if best["epoch_s"] <= TARGET_EPOCH_S and best["test_acc"] >= TARGET_TEST_ACC:
        return f"met by {key}"
    return (f"MISSED: fastest ResNet-18 run {key} at {best['epoch_s']:.2f} s/epoch, "
            f"test acc {best['test_acc']:.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device on this machine (torch {torch.__version__}); "
              f"nothing run, nothing recorded")
        return 0
    dataset = data.load(args.data_dir)
    runs = {}
    with tempfile.TemporaryDirectory() as storage:
        run, path = ray_trial_runner(dataset, storage)
        if run is None:
            print(path, flush=True)
            run = loop_runner(dataset)
        for model in args.models:
            preset = PRESETS[BOOK_PRESET[model]]
            for variant, options in VARIANTS.items():
                for sync in args.syncs:
                    config = TrainConfig(model=model, global_batch_size=preset["batch_sizes"][0],
                                         lr=preset["lrs"][0], num_epochs=args.epochs,
                                         sync=sync, use_gpu=True, **options)
                    key = f"{model}_{variant}_{sync}"
                    runs[key] = figures(run(config))
                    print(f"{key}: {runs[key]}", flush=True)
    emit(NAME, command_line(), {
        "device_name": torch.cuda.get_device_name(), "torch": torch.__version__, "path": path,
        "epoch_s_is": "training only, median of epochs 2.. (epoch 1 is warm-up)",
        **runs, **BOOK_RESNET18, "target": TARGET, "target_met": verdict(runs, args.epochs)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
