"""One data-parallel training run of the book's 13.5 / 13.6 on Ray Train workers.

    python experiments/train.py --model lenet --workers 2 --batch-size 256 --lr 0.2 --epochs 10

Prints one line per epoch and ends with the book's line, for example
`test acc: 0.84, 3.1 sec/epoch on 2 workers [cpu, cpu]`.
"""

import dataclasses
import sys
import time

import ray

# Only what checking the input needs is imported here; see main.
from orchestrator import data, storage
from orchestrator.cli import (OneLineParser, add_cluster_args, add_training_args,
                              connect_and_describe, exits_2_on_user_error, resolve_use_gpu)
from orchestrator.config import TrainConfig, require_int


def parse_args(argv: list[str] | None):
    parser = OneLineParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=1,
                        help="number of Ray Train workers (the book's num_gpus)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="global batch size, split across the workers")
    parser.add_argument("--lr", type=float, default=0.2, help="learning rate")
    parser.add_argument("--name", default=None,
                        help="run name in the Ray storage (default: model, workers and time); "
                             "the name of an earlier run resumes it from its last checkpoint")
    add_training_args(parser)
    add_cluster_args(parser)
    return parser.parse_args(argv)


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Everything the user typed is checked before the cluster is touched.
    config = TrainConfig(
        model=args.model, num_workers=args.workers, global_batch_size=args.batch_size,
        lr=args.lr, num_epochs=args.epochs, sync=args.sync, seed=args.seed,
        train_limit=args.train_limit, test_limit=args.test_limit,
        threads_per_worker=args.threads_per_worker,
        # Checked optimistically here and again once the cluster says whether it has GPUs.
        use_gpu=args.use_gpu != "no",
        sync_batchnorm=args.sync_batchnorm, warmup_epochs=args.warmup_epochs,
        bucket_cap_mb=args.bucket_cap_mb, shared_memory=args.shared_memory,
        precision=args.precision,
        channels_last=args.channels_last)
    require_int(args.max_failures, "--max-failures", minimum=0)
    dataset = data.load(args.data_dir, train_limit=args.train_limit, test_limit=args.test_limit)
    # Imported only now that the input has passed: Ray Train and torch take
    # 5 s to import on a 2-core machine, which a typo should not cost.
    from ray.train import TrainingFailedError

    from orchestrator.progress import EpochPrinter, book_line
    from orchestrator.trial import resources_per_worker, run_trial

    cluster = connect_and_describe(args)
    try:
        config = dataclasses.replace(config, use_gpu=resolve_use_gpu(args.use_gpu, cluster.num_gpus))
        cluster.require_room(config.num_workers, resources_per_worker(config))
        print(f"{config.model}, {config.num_workers} worker(s) on "
              f"{'GPUs (NCCL)' if config.use_gpu else 'CPUs (gloo)'}, sync {config.sync}: "
              f"global batch {config.global_batch_size} = {list(config.batch_sizes_per_worker)} "
              f"per worker, lr {config.lr}, {config.steps_per_epoch} steps/epoch, "
              f"{config.num_train_examples} train / {config.num_test_examples} test images")
        try:
            name = args.name or f"{config.model}-{config.num_workers}w-{time.strftime('%Y%m%d-%H%M%S')}"
            storage_location = storage.resolve(args.storage) if args.storage else None
            result = run_trial(config, ray.put(dataset), name=name, storage_path=storage_location,
                               max_failures=args.max_failures,
                               callbacks=[EpochPrinter(config.num_epochs)])
        except TrainingFailedError as error:
            print(f"training failed: {error}", file=sys.stderr)
            return 1
        history = result.return_value
        print(book_line(history))
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
