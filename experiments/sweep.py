"""The scaling sweep: Ray Tune over workers x batch size x learning rate, then a report.

    python experiments/sweep.py                     # the book's 13.5 experiment: LeNet, 1 and 2 workers
    python experiments/sweep.py --preset scaling    # the exercises: workers x batch x lr
    python experiments/sweep.py --preset d2l-13.6   # ResNet-18, meant for a GPU cluster
    python experiments/sweep.py --workers 1,2 --batch-size 256,512 --lr 0.05,0.1 --out results/run1

Writes trials.csv, epochs.csv, report.md and plots into --out.
"""

import dataclasses
import datetime
import json
import math
import sys
import time
from pathlib import Path

import ray

# Only what checking the input needs is imported here; see main.
from orchestrator import data, storage
from orchestrator.cli import (OneLineParser, add_cluster_args, add_training_args,
                              connect_and_describe, exits_2_on_user_error, resolve_use_gpu)
from orchestrator.config import (BATCH_SCALINGS, DEFAULT_PRESET, LR_SCALINGS, PRESETS, SCHEDULERS,
                                 SweepConfig)
from orchestrator.errors import UserError
from orchestrator.rundir import check_out_dir, claim_out_dir

EXIT_INTERRUPTED = 130  # the shell's code for a Ctrl-C
EXIT_TRIALS_FAILED = 1


def parse_args(argv: list[str] | None):
    parser = OneLineParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", metavar="FILE",
                        help="a JSON file of sweep options instead of a preset and the grid and "
                             "training options (a previous sweep's sweep.json works too)")
    parser.add_argument("--preset", default=DEFAULT_PRESET,
                        help=f"starting point for the grid: {', '.join(PRESETS)} "
                             f"(default {DEFAULT_PRESET}); the options below override it")
    grid = parser.add_argument_group("grid (comma-separated lists)")
    grid.add_argument("--workers", help="worker counts, e.g. 1,2,4")
    grid.add_argument("--batch-size", help="batch sizes b, e.g. 256,512")
    grid.add_argument("--lr", help="base learning rates, e.g. 0.05,0.1,0.2")
    grid.add_argument("--batch-scaling", choices=BATCH_SCALINGS,
                      help="global: the global batch is b for every k; per-worker: k*b")
    grid.add_argument("--lr-scaling", choices=LR_SCALINGS,
                      help="linear: lr = base_lr * global batch / b")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="fifo",
                        help="asha stops lagging trials early")
    parser.add_argument("--out", default=None,
                        help="results folder (default: results/<preset>-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted sweep in --out: finished trials are kept")
    parser.add_argument("--max-concurrent-trials", type=int, default=None,
                        help="default: as many of the largest trial as the cluster holds")
    add_training_args(parser)
    add_cluster_args(parser)
    # Presets decide these unless given: None means "not given".
    parser.set_defaults(model=None, epochs=None)
    args = parser.parse_args(argv)
    if args.config:
        # The file is the whole sweep: an option given beside it would be ignored.
        clashes = [action.option_strings[0] for action in parser._actions
                   if action.dest in SWEEP_OPTION_DESTS
                   and getattr(args, action.dest) != parser.get_default(action.dest)]
        if clashes:
            parser.error(f"--config holds the whole sweep; put {', '.join(clashes)} in the file")
    return args


# Command-line options that --config replaces (cluster, output and data location stay).
SWEEP_OPTION_DESTS = {"preset", "workers", "batch_size", "lr", "batch_scaling", "lr_scaling",
                      "scheduler", "model", "sync", "epochs", "seed", "use_gpu",
                      "threads_per_worker", "sync_batchnorm", "warmup_epochs", "bucket_cap_mb",
                      "shared_memory",
                      "precision", "channels_last", "train_limit", "test_limit", "max_failures"}


def sweep_from_file(path: str) -> SweepConfig:
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"--config {path}: unreadable or not JSON ({error})")
    if isinstance(values, dict) and set(values) == {"sweep", "storage"}:
        values = values["sweep"]  # a previous sweep's sweep.json
    return SweepConfig.from_dict(values, source=path)


def parse_list(text: str, option: str, kind: type) -> tuple:
    """'1,2,4' -> (1, 2, 4), with a one-line error naming the bad item."""
    items = text.split(",")
    values = []
    for item in items:
        try:
            value = kind(item.strip())
        except ValueError:
            raise UserError(f"{option}: {item.strip()!r} is not a{'n integer' if kind is int else ' number'} "
                            f"(expected a comma-separated list like {'1,2,4' if kind is int else '0.05,0.1'})")
        if kind is float and not math.isfinite(value):
            raise UserError(f"{option}: {item.strip()!r} is not a finite number")
        values.append(value)
    return tuple(values)


def sweep_from_args(args) -> SweepConfig:
    """The preset, overridden by what the command line gives; validated."""
    if args.preset not in PRESETS:
        raise UserError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    options = dict(PRESETS[args.preset])
    given = {
        "workers": args.workers and parse_list(args.workers, "--workers", int),
        "batch_sizes": args.batch_size and parse_list(args.batch_size, "--batch-size", int),
        "lrs": args.lr and parse_list(args.lr, "--lr", float),
        "batch_scaling": args.batch_scaling, "lr_scaling": args.lr_scaling,
        "model": args.model, "num_epochs": args.epochs,
    }
    options.update({key: value for key, value in given.items() if value is not None})
    # A preset may leave the worker counts to the cluster; (1,) validates the rest now.
    options["workers"] = options["workers"] or (1,)
    return SweepConfig(
        **options, sync=args.sync, seed=args.seed, train_limit=args.train_limit,
        test_limit=args.test_limit, threads_per_worker=args.threads_per_worker,
        warmup_epochs=args.warmup_epochs, scheduler=args.scheduler,
        max_failures=args.max_failures, sync_batchnorm=args.sync_batchnorm,
        bucket_cap_mb=args.bucket_cap_mb, shared_memory=args.shared_memory,
        precision=args.precision, channels_last=args.channels_last,
        # Checked optimistically here and again once the cluster says whether it has GPUs.
        use_gpu=args.use_gpu != "no")


def workers_up_to(capacity: int) -> tuple[int, ...]:
    """1, 2, 4, ... and the capacity itself: the scaling preset's worker counts."""
    counts = [1]
    while counts[-1] * 2 <= capacity:
        counts.append(counts[-1] * 2)
    if counts[-1] != capacity and capacity > 1:
        counts.append(capacity)
    return tuple(counts)


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Everything the user typed is checked before the cluster is touched.
    sweep = sweep_from_file(args.config) if args.config else sweep_from_args(args)
    workers_from_cluster = (not args.config and args.workers is None
                            and PRESETS[args.preset]["workers"] is None)
    if args.max_concurrent_trials is not None and args.max_concurrent_trials < 1:
        raise UserError(f"--max-concurrent-trials must be >= 1, got {args.max_concurrent_trials}")
    out_dir = Path(args.out or f"results/{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    stored = check_out_dir(out_dir, resume=args.resume)
    if stored is not None:
        sweep, storage_location = stored
        print(f"resuming the sweep in {out_dir} with the options it was started with")
    else:
        storage_location = storage.resolve(args.storage) if args.storage else str(out_dir / "ray")
    dataset = data.load(args.data_dir, train_limit=sweep.train_limit, test_limit=sweep.test_limit)
    # Imported only now that the input has passed: Ray Train, Tune, torch and
    # pandas take 5 s to import on a 2-core machine, which a typo should not cost.
    from orchestrator.results import (FAILED, isolation_table, markdown_table, scaling_table,
                                      summarize_trials, write_results)
    from orchestrator.sweep import (collect, is_complete, max_concurrent_trials, require_room,
                                    run_sweep)
    from orchestrator.trial import resources_per_worker

    cluster = connect_and_describe(args)
    try:
        if stored is None and not args.config:
            sweep = dataclasses.replace(sweep, use_gpu=resolve_use_gpu(args.use_gpu, cluster.num_gpus))
            if workers_from_cluster:
                capacity = cluster.max_workers(resources_per_worker(sweep.grid()[0].train))
                sweep = dataclasses.replace(sweep, workers=workers_up_to(max(capacity, 1)))
        require_room(sweep, cluster)
        if stored is None:
            claim_out_dir(out_dir, sweep, storage_location)
        concurrent = args.max_concurrent_trials or max_concurrent_trials(sweep, cluster)
        _print_plan(sweep, concurrent)
        started = time.monotonic()
        result_grid = run_sweep(sweep, ray.put(dataset), storage_path=storage_location,
                                max_concurrent=concurrent, resume=args.resume)
        trials, epochs = collect(result_grid, sweep, storage_location)
        title = [f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
                 f"- cluster: {cluster.describe()}",
                 f"- grid: workers {list(sweep.workers)}, batch {list(sweep.batch_sizes)} "
                 f"({sweep.batch_scaling}), lr {list(sweep.lrs)} (scaling {sweep.lr_scaling}), "
                 f"{sweep.num_epochs} epochs, model {sweep.model}, sync {sweep.sync}",
                 f"- sweep wall time: {time.monotonic() - started:.0f} s"]
        summary = summarize_trials(trials, epochs)
        paths = write_results(out_dir, summary, epochs, title_lines=title)
        print("\nScaling\n" + markdown_table(scaling_table(summary)))
        print("\nLearning rate per (workers, batch)\n" + markdown_table(isolation_table(summary)))
        print("\nResults:\n" + "\n".join(f"  {path}" for path in paths.values()))
        if not is_complete(result_grid, sweep, summary):
            print("\nThe sweep was interrupted: run the same command with --resume to "
                  "finish it (finished trials are kept).", file=sys.stderr)
            return EXIT_INTERRUPTED
        failed = summary[summary["status"] == FAILED]
        if len(failed):
            # The other trials' results are written; the exit status still
            # tells a script (or `ray job submit`) that the sweep is not whole.
            print(f"\n{len(failed)} trial(s) failed: {', '.join(failed['trial_id'])} "
                  f"(the error column of trials.csv says why)", file=sys.stderr)
            return EXIT_TRIALS_FAILED
        return 0
    finally:
        ray.shutdown()


def _print_plan(sweep: SweepConfig, concurrent: int) -> None:
    points = sweep.grid()
    print(f"{len(points)} trial(s), up to {concurrent} at a time, {sweep.num_epochs} epochs each:")
    for point in points:
        train = point.train
        print(f"  {train.num_workers} worker(s), global batch {train.global_batch_size} "
              f"({train.batch_size_per_worker}/worker), lr {train.lr:g}, "
              f"{train.steps_per_epoch} steps/epoch")


if __name__ == "__main__":
    sys.exit(main())
