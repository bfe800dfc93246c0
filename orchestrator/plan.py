"""What a run or a sweep will do, decided once and passed down whole.

`run_request` and `sweep_request` check everything the command line and
files decide, before Ray (or torch) is touched; `fit_to_cluster` settles the
rest once the cluster is known: GPUs or not, worker counts a preset leaves
open, room for every grid point, how many trials run at once.
"""

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator import storage
from orchestrator.cli import AUTO, config_options, given_flags
from orchestrator.cluster import Cluster
from orchestrator.config import DEFAULT_PRESET, PRESETS, SweepConfig, TrainConfig
from orchestrator.errors import UserError
from orchestrator.rundir import check_out_dir


@dataclass(frozen=True)
class SweepRequest:
    """A sweep as the user asked for it, checked, before the cluster is known."""

    sweep: SweepConfig
    gpu_from_cluster: bool
    """`--use-gpu auto`: GPU workers if the cluster has GPUs."""
    workers_from_cluster: bool
    """The preset's worker counts are 1, 2, 4, ... up to what the cluster holds."""
    out_dir: Path
    storage: str
    resume: bool
    max_concurrent_trials: int | None


@dataclass(frozen=True)
class SweepPlan:
    """The request's sweep fitted to the cluster, and how many of its trials run at once."""

    sweep: SweepConfig
    max_concurrent_trials: int


def run_request(args: argparse.Namespace) -> tuple[TrainConfig, bool]:
    """train.py's run, and whether its GPU use waits on the cluster: a grid of one point."""
    sweep, gpu_from_cluster = _sweep_from(config_options(args))
    (point,) = sweep.grid
    return point.train, gpu_from_cluster


def sweep_request(args: argparse.Namespace) -> SweepRequest:
    options = config_options(args)
    preset = getattr(args, "preset", None)
    if args.config:
        if preset:
            raise UserError("--config holds the whole sweep: give --config or --preset, not both")
        if options:
            raise UserError(f"--config holds the whole sweep; put {', '.join(given_flags(args))} "
                            f"in the file")
        sweep, label = _sweep_from_file(args.config), Path(args.config).stem
        gpu_from_cluster = workers_from_cluster = False
    else:
        label = preset or DEFAULT_PRESET
        if label not in PRESETS:
            raise UserError(f"unknown preset {label!r}; choose one of {', '.join(PRESETS)}")
        options = {**PRESETS[label], **options}
        workers_from_cluster = options["workers"] is None
        sweep, gpu_from_cluster = _sweep_from(options)
    if args.max_concurrent_trials is not None and args.max_concurrent_trials < 1:
        raise UserError(f"--max-concurrent-trials must be >= 1, got {args.max_concurrent_trials}")
    out_dir = Path(args.out or f"results/{label}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    stored = check_out_dir(out_dir, resume=args.resume)
    if stored is not None:
        (sweep, storage_location), gpu_from_cluster, workers_from_cluster = stored, False, False
    else:
        storage_location = storage.resolve(args.storage) if args.storage else str(out_dir / "ray")
    return SweepRequest(sweep=sweep, gpu_from_cluster=gpu_from_cluster,
                        workers_from_cluster=workers_from_cluster, out_dir=out_dir,
                        storage=storage_location, resume=args.resume,
                        max_concurrent_trials=args.max_concurrent_trials)


def fit_to_cluster(request: SweepRequest, cluster: Cluster) -> SweepPlan:
    """Settle GPUs and open worker counts, and reject a grid point the cluster can never hold."""
    sweep = request.sweep
    if request.gpu_from_cluster:
        sweep = with_gpu_from_cluster(sweep, cluster)
    if request.workers_from_cluster:
        capacity = cluster.max_workers(sweep.base.resources_per_worker)
        sweep = dataclasses.replace(sweep, workers=workers_up_to(max(capacity, 1)))
    for point in sweep.grid:
        cluster.require_room(point.train.num_workers, point.train.resources_per_worker,
                             what=f"the grid point with {point.train.num_workers} workers")
    # As many trials at once as the cluster holds of the largest.
    largest = max(point.train.num_workers for point in sweep.grid)
    concurrent = (request.max_concurrent_trials
                  or max(1, cluster.max_workers(sweep.base.resources_per_worker) // largest))
    return SweepPlan(sweep=sweep, max_concurrent_trials=concurrent)


def fit_run_to_cluster(config: TrainConfig, gpu_from_cluster: bool,
                       cluster: Cluster) -> TrainConfig:
    """train.py's run with its GPU use settled; refused if the cluster can never hold it."""
    if gpu_from_cluster:
        config = with_gpu_from_cluster(config, cluster)
    cluster.require_room(config.num_workers, config.resources_per_worker)
    return config


def with_gpu_from_cluster(config, cluster: Cluster):
    """`config` (a TrainConfig or a SweepConfig's base) with GPU workers iff the cluster has GPUs."""
    if isinstance(config, SweepConfig):
        return dataclasses.replace(config, base=with_gpu_from_cluster(config.base, cluster))
    return dataclasses.replace(config, use_gpu=cluster.num_gpus >= 1)


def workers_up_to(capacity: int) -> tuple[int, ...]:
    """1, 2, 4, ... and the capacity itself: the scaling preset's worker counts."""
    counts = [1]
    while counts[-1] * 2 <= capacity:
        counts.append(counts[-1] * 2)
    if counts[-1] != capacity and capacity > 1:
        counts.append(capacity)
    return tuple(counts)


def _sweep_from(options: dict) -> tuple[SweepConfig, bool]:
    """The sweep the command line asks for, and whether its GPU use waits on the cluster.

    Until the cluster says, `auto` is checked as GPU workers (the permissive
    case: synchronised BatchNorm needs them), and open worker counts as (1,).
    """
    gpu_from_cluster = options.get("use_gpu", AUTO) == AUTO
    checked = {**options, "workers": options.get("workers") or (1,)}
    if gpu_from_cluster:
        checked["use_gpu"] = True
    return SweepConfig.from_dict(checked, source=""), gpu_from_cluster


def _sweep_from_file(path: str) -> SweepConfig:
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"--config {path}: unreadable or not JSON ({error})")
    if isinstance(values, dict) and set(values) == {"sweep", "storage"}:
        values = values["sweep"]  # a previous sweep's sweep.json
    return SweepConfig.from_dict(values, source=path)
