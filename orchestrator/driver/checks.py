"""What a run or a sweep asks for, checked before Ray (or torch) is imported.

`run_request` and `sweep_request` check everything the command line and
files decide: the options, the --out folder and a resumed sweep's stored
options, the storage, the trackers and the user's model (model_check.py).
What waits on the cluster, plan.py settles once it is known.
"""

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

from orchestrator.driver import storage
from orchestrator.config.cli import AUTO, config_options, flag, given_flags
from orchestrator.config.grid import OPTION_FIELDS
from orchestrator.driver.cluster import check_dashboard_host, check_reachable, requested_address
from orchestrator.config.dataset import FASHION_MNIST, DataFacts
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import SweepConfig
from orchestrator.config.presets import DEFAULT_PRESET, PRESETS, quick
from orchestrator.driver.model_check import check_model
from orchestrator.errors import UserError
from orchestrator.records import LeftOut, counted
from orchestrator.driver.rundir import (DEFAULT_STORAGE, check_out_dir, new_sweep_id, out_dir_for,
                                       require_writable)
from orchestrator.driver import tracking


@dataclass(frozen=True)
class SweepRequest:
    """A sweep as the user asked for it, checked, before the cluster is known."""

    sweep: SweepConfig
    gpu_from_cluster: bool
    """`--use-gpu auto`: GPU workers if the cluster has GPUs."""
    workers_from_cluster: bool
    """The preset's worker counts are 1, 2, 4, ... up to what the cluster holds."""
    workers_given: bool
    """The worker counts are the user's (`--workers`, a `--config` file, a resumed
    sweep's): one the cluster cannot hold is refused. Else they are a preset's, and
    the points the cluster cannot hold are left out (`LeftOut`)."""
    out_dir: Path
    storage: str
    sweep_id: str
    """Names the sweep's Tune experiment and Train runs in its storage."""
    resume: bool
    max_concurrent_trials: int | None
    max_hours: float | None
    """Stop the sweep when the time spent plus its estimated time left exceeds it."""
    trackers: tracking.Trackers
    """Where `--tracking`'s trackers keep the sweep's runs."""
    left_out: tuple[LeftOut, ...] = ()
    """A resumed sweep's points left out when it started (sweep.json)."""
    ran_on: dict[str, str] | None = None
    """A resumed sweep's report lines on its cluster and timing (sweep.json), if kept."""


# The options a run's epochs record (loop.run_fields) that a resumed run must keep.
RESUMED_RUN_FIELDS = ("model", "dataset", "num_workers", "global_batch_size", "lr", "momentum",
                      "sync", "split", "precision", "steps_per_epoch", "num_test_examples",
                      "seed")
RESUMED_RUN_LABELS = {"steps_per_epoch": "steps an epoch (--train-limit, --batch-size)",
                      "num_test_examples": "test images (--test-limit)"}


def run_request(args: argparse.Namespace) -> tuple[TrainConfig, bool]:
    """train.py's run, and whether its GPU use waits on the cluster: a grid of one point."""
    if args.name is not None and (args.name in ("", ".", "..") or "/" in args.name
                                  or "\\" in args.name):
        raise UserError(f"--name {args.name!r} is not a plain folder name (no / or \\, not "
                        f"empty, . or ..): the run's folder goes in the storage under it")
    sweep, gpu_from_cluster = _sweep_from(config_options(args), data_dir=args.data_dir)
    (point,) = sweep.grid
    if args.check_equivalence and point.train.num_workers < 2:
        raise UserError("--check-equivalence compares k workers with one device: give "
                        "--workers 2 or more")
    check_model(point.train)
    _check_wait_for_nodes(args, gpu_from_cluster)
    _require_a_gpu_here(point.train, gpu_from_cluster, args.address)
    _check_address(args)
    if args.storage:
        storage.require_usable(args.storage)
    return point.train, gpu_from_cluster


def resumed_run_line(config: TrainConfig, name: str, run_folder: str) -> str | None:
    """train.py --name of an earlier run: Ray Train resumes it from its newest
    checkpoint, so it must be the same run. None where `run_folder` holds no
    checkpoint (a new run); else the line saying what is resumed, or a
    UserError naming the options that differ from the run's."""
    from orchestrator.training.checkpoint import read_newest_history
    try:
        found = read_newest_history(run_folder)
    except OSError as error:  # a bucket that refuses the listing, say
        raise UserError(f"--name {name}: cannot look for an earlier run's checkpoints in "
                        f"{run_folder} ({error})") from None
    if not found or not found[0]:
        return None
    last = found[0][-1]
    differ = [f"{RESUMED_RUN_LABELS.get(name_, name_)} {getattr(config, name_)} (the run's: "
              f"{last[name_]})"
              for name_ in RESUMED_RUN_FIELDS
              if name_ in last and getattr(config, name_) != last[name_]]
    if differ:
        raise UserError(f"--name {name} is an earlier run, which Ray Train would resume from "
                        f"its checkpoint, but {'; '.join(differ)} differ: give those options "
                        f"as they were, or another --name")
    return (f"resuming run {name} from its checkpoint after epoch {last['epoch']}: "
            f"{config.num_epochs - last['epoch']} of {config.num_epochs} epochs to go"
            if last["epoch"] < config.num_epochs else
            f"run {name} has trained its {counted(last['epoch'], 'epoch')} already: its result "
            f"is read back from its checkpoint")


def sweep_request(args: argparse.Namespace) -> SweepRequest:
    """sweep.py's arguments checked and settled: the sweep, where it writes, and how it
    runs; a UserError, before Ray starts, for anything it cannot run."""
    options = config_options(args)
    preset = getattr(args, "preset", None)
    if args.out is not None and not args.out.strip():
        raise UserError("--out is empty: give the folder for the sweep's results")
    if args.resume and args.out is None:
        raise UserError("--resume continues the sweep in the folder --out names: give --out")
    # What the command asks of the sweep, by option: on --resume it must be what the
    # sweep was started with (a preset's or a file's every option; else those given).
    asked = dict(options)
    if args.config:
        if preset:
            raise UserError("--config holds the whole sweep: give --config or --preset, not both")
        if options or args.quick:
            flags = [*given_flags(args), *(["--quick"] if args.quick else [])]
            raise UserError(f"--config holds the whole sweep; put {', '.join(flags)} in the file")
        (sweep, gpu_from_cluster), label = (_sweep_from_file(args.config, args.data_dir),
                                            Path(args.config).stem)
        asked = _read_options(args.config)
        workers_from_cluster, workers_given = False, True
    else:
        label = preset or DEFAULT_PRESET
        if label not in PRESETS:
            raise UserError(f"unknown preset {label!r}; choose one of {', '.join(PRESETS)}")
        workers_given = "workers" in options
        reduced = quick(label) if args.quick else {}
        if reduced and options.get("dataset", FASHION_MNIST) != FASHION_MNIST:
            # --quick's subsets, no larger than the user's data set
            facts = data_facts(options["dataset"], args.data_dir)
            reduced = {**reduced, "train_limit": min(reduced["train_limit"], facts.train_size),
                       "test_limit": min(reduced["test_limit"], facts.test_size)}
        options = {**PRESETS[label], **reduced, **options}
        if preset or args.quick:
            asked = {**options, "workers": asked.get("workers")}  # a preset's may be fitted
        workers_from_cluster = options["workers"] is None
        sweep, gpu_from_cluster = _sweep_from(options, data_dir=args.data_dir)
    if args.max_concurrent_trials is not None and args.max_concurrent_trials < 1:
        raise UserError(f"--max-concurrent-trials must be >= 1, got {args.max_concurrent_trials}")
    if args.max_hours is not None and not (math.isfinite(args.max_hours) and args.max_hours > 0):
        raise UserError(f"--max-hours must be a finite number > 0, got {args.max_hours}")
    out_dir = out_dir_for(args.out, label, args.storage)
    stored = check_out_dir(out_dir, resume=args.resume,
                           facts_of=lambda dataset: data_facts(dataset, args.data_dir))
    left_out, ran_on = (), None
    if stored is not None:
        setters = [name for name, given in (("--preset", preset), ("--quick", args.quick),
                                            ("--repeats", args.repeats is not None),
                                            ("--config", args.config)) if given]
        _require_the_stored_options(asked, sweep, stored.sweep, out_dir, setters)
        if args.storage and storage.resolve(args.storage) != stored.storage:
            raise UserError(f"--resume continues the sweep in {out_dir} in its own storage, "
                            f"{stored.storage}: drop --storage {args.storage}")
        sweep, storage_location, sweep_id = stored.sweep, stored.storage, stored.sweep_id
        ran_on = stored.ran_on
        try:
            left_out = tuple(LeftOut.from_dict(values) for values in stored.left_out)
        except TypeError as error:
            raise UserError(f"{out_dir}/sweep.json: its left_out is not a plan's ({error})")
        gpu_from_cluster, workers_from_cluster, workers_given = False, False, True
    else:
        storage_location = (storage.resolve(args.storage) if args.storage
                            else str(out_dir / DEFAULT_STORAGE))
        sweep_id = new_sweep_id(out_dir)
    storage.require_usable(storage_location)
    folder = storage.local_path(storage_location)
    if folder is not None and args.storage and stored is None:
        require_writable(folder, "--storage")
    _check_wait_for_nodes(args, gpu_from_cluster,
                          counts_from_cluster=label if workers_from_cluster else None)
    gpu_asked = ()  # --use-gpu yes, the default's words
    if stored is not None:  # its GPU use settled when it started, --config's "auto" too
        gpu_asked = (f"the sweep in {out_dir} runs GPU workers", None)
    elif args.config:
        gpu_asked = (f"{args.config} sets use_gpu true", "set \"use_gpu\": \"auto\" in it")
    _require_a_gpu_here(sweep.base, gpu_from_cluster, args.address, *gpu_asked)
    _check_address(args)
    check_model(sweep.base, sweep.sync)
    trackers = tracking.resolve(sweep, out_dir=out_dir, storage_location=storage_location,
                                sweep_id=sweep_id)
    return SweepRequest(sweep=sweep, gpu_from_cluster=gpu_from_cluster,
                        workers_from_cluster=workers_from_cluster, workers_given=workers_given,
                        out_dir=out_dir, storage=storage_location, sweep_id=sweep_id,
                        resume=args.resume, max_concurrent_trials=args.max_concurrent_trials,
                        max_hours=args.max_hours, trackers=trackers, left_out=left_out,
                        ran_on=ran_on)


def data_facts(dataset: str, data_dir: str | None) -> DataFacts:
    """The data set's facts; Fashion-MNIST's without numpy or torch (a typo in
    the command line costs no import), any other's by loading it (datasets.py)."""
    if dataset == FASHION_MNIST:
        return DataFacts()
    from orchestrator.training import datasets
    return datasets.facts(dataset, data_dir)


def _sweep_from(options: dict, *, source: str = "", data_dir: str | None = None
                ) -> tuple[SweepConfig, bool]:
    """The sweep the command line asks for, and whether its GPU use waits on the cluster.

    Until the cluster says, `auto` is checked as GPU workers (the permissive
    case: synchronised BatchNorm needs them), and open worker counts as (1,).
    """
    gpu_from_cluster = options.get("use_gpu", AUTO) == AUTO
    checked = dict(options)
    if checked.get("workers", ()) is None:
        checked["workers"] = (1,)
    if gpu_from_cluster:
        checked["use_gpu"] = True
    return SweepConfig.from_dict(checked, source=source, facts_of=lambda dataset: data_facts(
        dataset, data_dir)), gpu_from_cluster


def _require_the_stored_options(asked: dict, sweep: SweepConfig, stored: SweepConfig,
                                out_dir: Path, setters: list[str]) -> None:
    """A --resume runs the sweep as it was started: an option the command asks for
    with another value is refused in one line, not dropped without a word (Tune
    restores the stored grid whatever the command says). `asked`: the options
    whose values the command set (None or auto: left to the cluster, not
    compared); `sweep`: the command's sweep built from them; `setters`: the
    flags that set options wholesale (--preset, --quick, --repeats, --config)."""
    wanted, kept = sweep.to_dict(), stored.to_dict()
    differ = [f"{_label(name)} {_shown(wanted[name])} (the sweep's: {_shown(kept[name])})"
              for name, value in asked.items()
              if value is not None and value != AUTO and wanted[name] != kept[name]]
    if differ:
        by = f" (or the {'/'.join(setters)} that set them)" if setters else ""
        raise UserError(f"--resume continues the sweep in {out_dir} with the options it was "
                        f"started with, and this command asks for others: {'; '.join(differ)}; "
                        f"drop those{by}, or start a new sweep in another --out")


def _label(name: str) -> str:
    """An option as its flag names it: --lr, --batch-size; a yes/no one without its --no-."""
    return flag(OPTION_FIELDS[name]).replace("--no-", "--", 1)


def _shown(value) -> str:
    """An option's value as a command line gives it: 1,2 for a list, yes/no."""
    if isinstance(value, (tuple, list)):
        return ",".join(_shown(item) for item in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _read_options(path: str) -> dict:
    """The options a --config file sets (the sweep of a sweep.json), as written."""
    values = json.loads(Path(path).read_text())  # read and checked by _sweep_from_file
    return values["sweep"] if {"sweep", "storage"} <= set(values) else values


def _sweep_from_file(path: str, data_dir: str | None) -> tuple[SweepConfig, bool]:
    """The file's sweep; a file without `use_gpu` (or with "auto") leaves it to the
    cluster, as the command line does."""
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"--config {path}: unreadable or not JSON ({error})")
    sweep_json_keys = {"format", "sweep", "storage", "id", "left_out", "ran_on"}
    if isinstance(values, dict) and {"sweep", "storage"} <= set(values) <= sweep_json_keys:
        values = values["sweep"]  # a previous sweep's sweep.json
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected an object of sweep options, "
                        f"got {type(values).__name__}")
    return _sweep_from(values, source=path, data_dir=data_dir)


def _check_address(args: argparse.Namespace) -> None:
    """The cluster the job would use: an embedded Ray's `--dashboard-host` must be
    this machine's, an attached cluster's address must answer (a socket, in
    milliseconds: before the data set loads and Ray is imported)."""
    address = requested_address(args.address)
    if address is None:
        check_dashboard_host(args.dashboard_host)
    else:
        check_reachable(address)


def _check_wait_for_nodes(args: argparse.Namespace, gpu_from_cluster: bool,
                          counts_from_cluster: str | None = None) -> None:
    """`--wait-for-nodes` asks an attached cluster's autoscaler for workers of one
    kind, as many as the largest run has (scale_up.py): it needs to know both.
    `counts_from_cluster`: the preset whose worker counts come from the nodes up."""
    wait = args.wait_for_nodes
    if wait is None:
        return
    if not (math.isfinite(wait) and wait > 0):
        raise UserError(f"--wait-for-nodes must be a number of seconds > 0, got {wait:g}")
    if requested_address(args.address) is None:
        raise UserError("--wait-for-nodes asks an attached cluster's autoscaler for nodes, and "
                        "the embedded local Ray has none: give --address (or RAY_ADDRESS) of a "
                        "cluster with an autoscaler, or leave --wait-for-nodes out")
    if counts_from_cluster:
        raise UserError(f"--wait-for-nodes asks the autoscaler for the largest run's workers, "
                        f"but the {counts_from_cluster} preset takes its worker counts from the "
                        f"nodes that are up: give --workers (1,2,8, say)")
    if gpu_from_cluster:
        auto = (f"{args.config} leaves use_gpu to the nodes that are up (\"auto\", or not "
                f"given): set \"use_gpu\": true (or false) in it"
                if getattr(args, "config", None) else
                "--use-gpu auto decides from the nodes that are up: give --use-gpu yes (or no)")
        raise UserError(f"--wait-for-nodes asks the autoscaler for GPU or CPU workers, and "
                        f"{auto}")


def _require_a_gpu_here(config: TrainConfig, gpu_from_cluster: bool, address: str | None,
                        asked: str = "--use-gpu yes", auto: str | None = "--use-gpu auto"
                        ) -> None:
    """GPU workers (`asked`: what asks for them) for an embedded Ray on a machine
    without a GPU: refused before Ray starts, since that Ray could only hold what
    this machine has; `auto`: the other way out than --address, if there is one."""
    if not config.use_gpu or gpu_from_cluster or requested_address(address) is not None:
        return
    import torch  # only here: no other check needs its seconds of import
    if not torch.cuda.is_available():
        raise UserError(f"{asked}, but this machine has no GPU that torch can use and the "
                        f"run would start a Ray of its own here; give --address of a cluster "
                        f"with GPUs{f', or {auto}' if auto else ''}")
