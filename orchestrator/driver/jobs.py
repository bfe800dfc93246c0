"""The two jobs the scripts run: one training run, and a sweep with its report.

Each takes the parsed command line, checks it whole (checks.py) before Ray
Train, Tune, torch or pandas are imported, and only then connects and runs: a
typo costs a second, not the 5 s those imports take on a 2-core machine.
"""

import argparse
import datetime
import json
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from orchestrator.config.dataset import shape_text
from orchestrator.driver import cluster as ray_cluster
from orchestrator.driver import job_env
from orchestrator.training import datasets
from orchestrator.driver import checks, plan
from orchestrator.driver import storage
from orchestrator.driver.model_check import parameters_text
from orchestrator.driver.rundir import claim_out_dir
from orchestrator.records import write_atomically


@dataclass(frozen=True)
class RunOutcome:
    final_line: str
    """The book's line (`test acc: 0.84, ...`), or why training failed."""
    failed: bool


# The sweep's microbenchmark, kept beside its results (training/calibration.py).
CALIBRATION_FILE = "calibration.json"
DRY_RUN_LINE = "dry run: the plan above, fitted to this cluster; nothing trained, nothing written"


@dataclass(frozen=True)
class SweepOutcome:
    tables: str
    """The scaling and learning-rate tables, as printed at the end."""
    paths: list[Path]
    interrupted: bool
    """Some trial did not end: the same command with --resume finishes the sweep."""
    failed_trials: list[str]
    dry_run: bool = False
    """--dry-run: the plan was printed, and nothing else done."""


def train(args: argparse.Namespace) -> RunOutcome:
    """One run of `TrainConfig`, printing a line per epoch."""
    config, gpu_from_cluster = checks.run_request(args)
    dataset = datasets.load(config.dataset, args.data_dir, train_limit=config.train_limit,
                            test_limit=config.test_limit)
    from ray.train import TrainingFailedError
    from ray.train.constants import DEFAULT_STORAGE_PATH

    from orchestrator.training.checkpoint import load_checkpoint
    from orchestrator.driver.printers import EpochPrinter
    from orchestrator.records import book_line, memory_format_text, step_graph_text, target_line
    from orchestrator.driver.trial import run_trial

    storage_path = storage.resolve(args.storage) if args.storage else None
    name = args.name or (f"{_short(config.model)}-{config.num_workers}w-"
                         f"{time.strftime('%Y%m%d-%H%M%S')}")
    # An earlier run of that name must be this run: checked before Ray starts.
    resumed = (checks.resumed_run_line(config, name, storage.join(
        storage_path or DEFAULT_STORAGE_PATH, name))
        if args.name and not args.check_equivalence else None)
    cluster = _connect(args, config)
    try:
        config = plan.fit_run_to_cluster(config, gpu_from_cluster, cluster)
        # Ray Train's own default (~/ray_results) is a local folder as well.
        storage.require_seen_by_every_node(storage_path or DEFAULT_STORAGE_PATH)
        print(f"{config.model}{parameters_text(config)}, {config.num_workers} worker(s) on "
              f"{workers_text(config)}, sync {config.sync}, "
              f"split {config.split}: "
              f"global batch {config.global_batch_size} = {list(config.batch_sizes_per_worker)} "
              f"per worker, lr {config.lr}, momentum {config.momentum}, "
              f"{config.precision}, {config.num_epochs} epochs of {config.steps_per_epoch} "
              f"steps"
              + (", SyncBatchNorm" if config.sync_batchnorm else "")
              + (f", target test accuracy {config.target_acc:g}"
                 if config.target_acc is not None else "")
              + f", {config.num_train_examples} train / {config.num_test_examples} test images "
              f"of {data_text(config)}")
        if resumed:
            print(resumed)
        if args.dry_run:
            return RunOutcome(DRY_RUN_LINE, failed=False)
        if args.check_equivalence:
            from orchestrator.driver import equivalence
            try:
                verdict = equivalence.run(config, ray.put(dataset), name=f"{name}-equivalence",
                                          storage_path=storage_path)
            except (TrainingFailedError, equivalence.Diverged) as error:
                return RunOutcome(f"equivalence: not checked: {error}", failed=True)
            return RunOutcome(verdict.line(config.num_workers), failed=not verdict.agree)
        try:
            result = run_trial(config, ray.put(dataset), name=name,
                               storage_path=storage_path,
                               callbacks=[EpochPrinter(config.num_epochs)])
        except TrainingFailedError as error:
            return RunOutcome(f"training failed: {error}", failed=True)
        final_line = (f"memory format: {memory_format_text(result.return_value[-1])}"
                      f"{step_graph_text(result.return_value[-1])}\n"
                      + book_line(result.return_value))
        if config.target_acc is not None:
            with result.checkpoint.as_directory() as folder:
                _, _, evaluations = load_checkpoint(Path(folder))
            final_line += "\n" + target_line(evaluations, config.target_acc)
        return RunOutcome(final_line, failed=False)
    finally:
        ray.shutdown()


def sweep(args: argparse.Namespace) -> SweepOutcome:
    """The sweep's Tune experiment, then trials.csv, epochs.csv, report.md and plots."""
    request = checks.sweep_request(args)
    if request.resume and not args.dry_run:
        calibration = _stored_calibration(request.out_dir)
        ended = _ended_sweep(request, calibration)
        if ended is not None:
            print(f"every trial of the sweep in {request.out_dir} has ended: its report is "
                  f"rewritten from the stored results, without Ray")
            return _report(request, request.sweep, ended, calibration,
                           ran_on=request.ran_on, left_out=request.left_out, session=None)
    base = request.sweep.base
    dataset = datasets.load(base.dataset, args.data_dir, train_limit=base.train_limit,
                            test_limit=base.test_limit)
    from orchestrator.driver.tune_experiment import run_experiment

    cluster = _connect(args, base)
    try:
        sweep_plan = plan.fit_to_cluster(request, cluster)
        storage.require_seen_by_every_node(request.storage)
        sweep = sweep_plan.sweep
        ran_on = {"cluster": cluster.describe(), "timing": timing_line(sweep_plan)}
        if request.resume:
            print(f"resuming the sweep in {request.out_dir} with the options it was started with"
                  + ("; --max-concurrent-trials is its own too (Tune restores it)"
                     if args.max_concurrent_trials is not None else ""))
        elif not args.dry_run:
            claim_out_dir(request.out_dir, sweep, request.storage, request.sweep_id,
                          [cell.to_dict() for cell in sweep_plan.left_out], ran_on)
        _print_plan(sweep_plan)
        trackers = request.trackers
        for line in trackers.lines():
            print(f"tracking: {line}")
        if args.dry_run:
            print(f"results: {request.out_dir}; storage: {request.storage}")
            return SweepOutcome(tables="", paths=[], interrupted=False, failed_trials=[],
                                dry_run=True)
        if trackers.tensorboard_command:
            print(trackers.tensorboard_command)  # a line to paste, alone
        started = time.monotonic()
        calibration = _calibration(request, sweep_plan)
        calibrated = time.monotonic()
        result_grid = run_experiment(sweep, ray.put(dataset), storage_path=request.storage,
                                sweep_id=request.sweep_id,
                                max_concurrent=sweep_plan.max_concurrent_trials,
                                resume=request.resume, max_hours=request.max_hours,
                                trackers=trackers, placements=sweep_plan.placements)
        session = Session(started, calibration_s=calibrated - started,
                          trials_s=time.monotonic() - calibrated)
        return _report(request, sweep, result_grid, calibration, ran_on=ran_on,
                       left_out=sweep_plan.left_out, session=session)
    finally:
        ray.shutdown()


def _ended_sweep(request: checks.SweepRequest, calibration: dict | None):
    """A resumed sweep with nothing left to run, as Tune's results read from its
    storage alone: every grid point's trial ended without an error (errored ones
    would run again), its calibration (`calibration`, read from calibration.json)
    stored where it needs one, and its cluster's lines kept in sweep.json. None
    where the cluster is needed: a bucket's storage, an older sweep.json, or
    anything left to run."""
    if request.ran_on is None or storage.local_path(request.storage) is None:
        return None
    if calibration is None and _calibrates(request.sweep, request.left_out):
        return None
    from orchestrator.driver.tune_results import ended_experiment
    return ended_experiment(request.sweep, request.storage, request.sweep_id)


def _report(request: checks.SweepRequest, sweep, result_grid, calibration: dict | None, *,
            ran_on: dict[str, str], left_out, session: "Session | None") -> SweepOutcome:
    """trials.csv, epochs.csv, report.md, plots and answers from the sweep's Tune
    results; `session`: this one's times, None where nothing ran (a rewrite)."""
    from orchestrator.driver.tune_results import collect, trials_not_ended
    from orchestrator.report import write_sweep_report

    base, trackers = sweep.base, request.trackers
    trials, epochs, evaluations = collect(result_grid, sweep, request.storage,
                                          sweep_id=request.sweep_id)
    sessions = _record_session(request.out_dir, session)
    # Tune's count; the report adds trials whose epochs say they did not end.
    not_ended = trials_not_ended(result_grid, sweep)
    title = [f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
             f"- cluster: {ran_on['cluster']}",
             f"- {'exercises study (orchestrator/config/studies.py) over ' if sweep.study == 'exercises' else ''}"
             f"grid: workers {list(sweep.workers)}, batch {list(sweep.batch_sizes)} "
             f"({sweep.batch_scaling}), lr {list(sweep.lrs)} (scaling {sweep.lr_scaling}), "
             f"momentum {list(sweep.momentums)}, {base.num_epochs} epochs, "
             f"model {base.model}, sync {list(sweep.sync)}, split {list(sweep.split)}, "
             f"precision {list(sweep.precision)}",
             f"- evaluations per epoch: {base.evals_per_epoch}; target test accuracy: "
             f"{base.target_acc if base.target_acc is not None else 'none'}"
             f"{' (trials stop there)' if sweep.stop_at_target else ''}",
             f"- data: {base.num_train_examples} training and {base.num_test_examples} "
             f"test images{' (subsets)' if _data_note(base) else ''} of "
             f"{data_text(base)}",
             f"- timing: {ran_on['timing']}",
             f"- sweep wall time: {_sessions_text(sessions)}",
             *(f"- tracking: {line}" for line in trackers.lines())]
    # The fitted sweep's use_gpu: before the cluster is known, `auto` reads as GPU workers.
    report = write_sweep_report(request.out_dir, trials, epochs, evaluations, calibration,
                                title_lines=title, target_acc=base.target_acc,
                                data_note=_data_note(base), use_gpu=sweep.base.use_gpu,
                                left_out=left_out, sessions=sessions, not_ended=not_ended)
    interrupted = bool(not_ended or report.interrupted_trials)
    return SweepOutcome(tables=report.tables, paths=list(report.paths.values()),
                        interrupted=interrupted, failed_trials=report.failed_trials)


def _calibration(request: checks.SweepRequest, sweep_plan: plan.SweepPlan) -> dict | None:
    """The sweep's microbenchmark (calibration.py), run once: a resumed sweep reads
    its calibration.json. None for a sweep of one worker count that runs every
    point (nothing to model), or one told not to calibrate; a sweep of single
    workers with points left out needs their gradient bytes alone, counted here."""
    sweep = sweep_plan.sweep
    stored = _stored_calibration(request.out_dir)
    if stored is not None or not _calibrates(sweep, sweep_plan.left_out):
        return stored
    from orchestrator.training import calibration

    workers = max(sweep.workers)
    if workers == 1:
        print("calibrating: the gradient bytes, counted here, for the scaling model's what-if "
              "of the points left out (one worker times no sum)")
        measured = calibration.counted_alone(sweep)
    else:
        print(f"calibrating: allreduce per transport and compute on {workers} workers at "
              f"once, for the scaling model")
        measured = _run_calibration(request, sweep_plan)
        if measured is None:
            return None
    write_atomically(request.out_dir / CALIBRATION_FILE,
                     lambda target: target.write_text(json.dumps(measured, indent=1)))
    return measured


def _run_calibration(request: checks.SweepRequest, sweep_plan: plan.SweepPlan) -> dict | None:
    """The microbenchmark on a worker group of the sweep's largest trial; None if it failed."""
    from ray.train import TrainingFailedError

    from orchestrator.driver.tune_experiment import train_runs_path
    from orchestrator.driver.trial import run_calibration

    sweep = sweep_plan.sweep
    try:
        measured = run_calibration(
            sweep, name="calibration",
            storage_path=train_runs_path(request.storage, request.sweep_id),
            placement=(sweep_plan.placements or {}).get(max(sweep.workers)))
    except TrainingFailedError as error:
        print(f"calibration failed, the report will have no scaling model: {error}")
        return None
    return measured


def _calibrates(sweep, left_out) -> bool:
    """Whether the sweep runs its microbenchmark: for two or more worker counts, or
    for points left out, which are estimated from the 1-worker trial and the
    gradient bytes it records (even where one worker count runs); unless told not to."""
    return sweep.calibrate and (len(set(sweep.workers)) >= 2 or bool(left_out))


def _stored_calibration(out_dir: Path) -> dict | None:
    path = out_dir / CALIBRATION_FILE
    return json.loads(path.read_text()) if path.exists() else None


@dataclass(frozen=True)
class Session:
    """One session of a sweep: when it began (time.monotonic()), and its seconds in
    the calibration and in Tune's run of the trials."""
    started: float
    calibration_s: float
    trials_s: float


def _record_session(out_dir: Path, session: Session | None) -> list[dict]:
    """Every session of the sweep (a --resume is one more), kept in sessions.json so
    that rewriting the report keeps the first session's times; `session` None: a
    report rewritten with nothing run adds none."""
    path = out_dir / "sessions.json"
    sessions = json.loads(path.read_text()) if path.exists() else []
    if session is not None:
        sessions.append({"ended": datetime.datetime.now().isoformat(timespec="seconds"),
                         "wall_s": round(time.monotonic() - session.started),
                         "calibration_s": round(session.calibration_s, 1),
                         "trials_s": round(session.trials_s, 1)})
        write_atomically(path, lambda target: target.write_text(json.dumps(sessions, indent=1)))
    return sessions


def _sessions_text(sessions: list[dict]) -> str:
    """The sweep's wall seconds over every session."""
    if not sessions:
        return "not recorded"
    if len(sessions) == 1:
        return f"{sessions[0]['wall_s']} s"
    return (f"{sum(session['wall_s'] for session in sessions)} s over {len(sessions)} sessions "
            f"({', '.join(str(session['wall_s']) for session in sessions)} s)")


def _short(model: str) -> str:
    """A model's name as a run's name can hold it: a reference's function."""
    return model.rpartition(":")[2]


def data_text(config) -> str:
    """The data set and the shapes the model was built for: "fashion-mnist (1x28x28,
    10 classes)"."""
    return (f"{config.dataset} ({shape_text(config.input_shape)}, "
            f"{config.num_classes} classes)")


def _data_note(base) -> str:
    """What the report says of data subsets (--quick, --train-limit); empty on full data."""
    if base.train_limit is None and base.test_limit is None:
        return ""
    return (f"{base.num_train_examples} training / {base.num_test_examples} test images, "
            f"{base.num_epochs} epochs")


def _connect(args: argparse.Namespace, config) -> ray_cluster.Cluster:
    """Attach to `--address` / RAY_ADDRESS or start an embedded Ray, and say which;
    `config`'s own model and data set modules go with the job (job_env.py)."""
    cluster = ray_cluster.connect(ray_cluster.requested_address(args.address),
                                  dashboard_host=args.dashboard_host,
                                  user_code=job_env.user_code(config))
    print(cluster.describe())
    for path in cluster.shipped:
        print(f"shipping {path} to every node with the job (py_modules)")
    if cluster.dashboard_url:
        print(cluster.dashboard_hint)
    return cluster


def timing_line(sweep_plan: plan.SweepPlan) -> str:
    if sweep_plan.placements:
        return (f"each trial timed on whole nodes of its own, up to "
                f"{sweep_plan.max_concurrent_trials} trials at a time on disjoint nodes")
    if not sweep_plan.side_by_side:
        return "each trial timed with its nodes to itself"
    # The plan, not what happened: report.md's "Trials at once" says how many did overlap.
    return (f"up to {sweep_plan.max_concurrent_trials} trials side by side, sharing nodes: where "
            f"trials overlapped (report.md's 'Trials at once'), their epoch times, speedups and "
            f"efficiencies compare runs that competed for the same cores, memory bandwidth and "
            f"devices")


def workers_text(config) -> str:
    """What the workers run on, and the backend their sums go over."""
    if not config.use_gpu:
        return "CPUs (gloo)"
    if config.gpus_per_worker < 1:
        return (f"GPUs, {config.gpus_per_worker:g} of one each: workers may share a GPU "
                f"(gloo, where NCCL refuses two ranks on one device)")
    return "GPUs (NCCL)"


def _print_plan(sweep_plan: plan.SweepPlan) -> None:
    points = sweep_plan.sweep.grid
    base = sweep_plan.sweep.base
    print(f"model {base.model}{parameters_text(base)}, data {data_text(base)}: "
          f"{base.num_train_examples} train / "
          f"{base.num_test_examples} test images")
    timing = timing_line(sweep_plan)
    if (sweep_plan.max_concurrent_trials == 1 and len(points) > 1
            and len({point.train.num_workers for point in points}) > 1):
        timing += (": trials of several worker counts compare their times, so they run one "
                   "at a time (--max-concurrent-trials N runs N side by side)")
    print(f"timing: {timing}")
    settings = _settings_text(sweep_plan.sweep)
    if settings:
        print(f"every trial: {settings}")
    print(f"{len(points)} trial(s), up to {sweep_plan.max_concurrent_trials} at a time, "
          f"workers on {workers_text(base)}:")
    several_seeds = len({point.train.seed for point in points}) > 1  # replicas apart
    for point in points:
        train = point.train
        print(f"  {f'[{point.part}] ' if point.part else ''}"
              f"{train.num_workers} worker(s), global batch {train.global_batch_size} "
              f"({train.batch_size_per_worker}/worker), lr {train.lr:g}, "
              f"momentum {train.momentum:g}, sync {train.sync}, split {train.split}, "
              f"{train.precision}, {f'seed {train.seed}, ' if several_seeds else ''}"
              f"{train.num_epochs} epochs of {train.steps_per_epoch} steps"
              + (f", lr warmed up over {train.warmup_epochs} epoch(s) from "
                 f"{train.warmup_start_lr:g}" if train.warmup_epochs else "")
              + (f", {train.threads_per_worker} threads" if train.threads_per_worker > 1 else "")
              + (f", last worker slowed {train.straggler_slowdown:g}x"
                 if train.straggler_slowdown > 1 else "")
              + _placement_part(sweep_plan.placements, train.num_workers))
    if sweep_plan.left_out:
        print(f"{len(sweep_plan.left_out)} point(s) of the preset left out, the report "
              f"estimates each with the scaling model (a what-if, not a measurement):")
        for cell in sweep_plan.left_out:
            print(f"  {cell.line}")


def _settings_text(sweep) -> str:
    """The sweep-wide options that change what a trial does or when it ends, which
    the trials' lines do not show: empty where all are the defaults."""
    base = sweep.base
    parts = []
    if base.target_acc is not None:
        parts.append(f"target test accuracy {base.target_acc:g}"
                     + (", the trial ends there (--stop-at-target)" if sweep.stop_at_target
                        else ", recorded when reached"))
    if sweep.scheduler == "asha":
        parts.append("ASHA stops trials that lag (--scheduler asha)")
    if base.evals_per_epoch > 1:
        parts.append(f"evaluated {base.evals_per_epoch} times an epoch")
    if base.sync_batchnorm:
        parts.append("BatchNorm statistics synchronised across workers (--sync-batchnorm)")
    return "; ".join(parts)


def _placement_part(placements, num_workers: int) -> str:
    """Where a trial's workers go, when they get whole nodes of their own."""
    if not placements:
        return ""
    where = placements[num_workers]
    nodes = "1 whole node" if where.num_nodes == 1 else f"{where.num_nodes} whole nodes"
    return f", on {nodes} ({where.resources_per_worker['CPU']:g} CPUs reserved per worker)"
