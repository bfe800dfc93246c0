"""The two jobs the scripts run: one training run, and a sweep with its report.

Each takes the parsed command line, checks it whole (checks.py) before Ray,
torch or pandas are imported, and only then connects and runs: a typo or an
address where no cluster answers costs a fifth of a second, not the 5 s those
imports take on a 2-core machine.
"""

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.driver import cluster as ray_cluster
from orchestrator.driver import job_env
from orchestrator.training import datasets
from orchestrator.driver import checks, plan, scale_up, shipped_code
from orchestrator.driver import device_check, interrupts, storage
from orchestrator.driver.failures import EQUIVALENCE, RUN, failure_text
from orchestrator.driver.calibrate import (CollectivesFailed, calibrates, stored_calibration,
                                           sweep_calibration)
from orchestrator.driver.model_check import (first_worker_floor_mb, memory_line, parameters_text,
                                             require_room_in_memory)
from orchestrator.driver.plan_text import (accumulation_text, data_text, print_plan, timing_line,
                                            workers_text)
from orchestrator.driver.rundir import (claim_out_dir, refuse_relative_under_job, release_claim,
                                       tune_began)
from orchestrator.driver.sweep_files import RESUME_HINT, Session, SweepOutcome, write_report
from orchestrator.records import counted


@dataclass(frozen=True)
class RunOutcome:
    final_line: str
    """The book's line (`test acc: 0.84, ...`), or why training failed."""
    failed: bool
    interrupted: bool = False
    """Ctrl-C stopped it; `final_line` says what the same command resumes."""


DRY_RUN_LINE = "dry run: the plan above, fitted to this cluster; nothing trained, nothing written"
HELD_CTRL_C_LINE = ("Ctrl-C while Ray shut down, after the job had ended: held until the "
                    "shutdown ended (a second Ctrl-C stops it at once)")


def train(args: argparse.Namespace) -> RunOutcome:
    """One run of `TrainConfig`, printing a line per epoch."""
    config, gpu_from_cluster = checks.run_request(args)
    refuse_relative_under_job("--storage", args.storage,
                              "give it an absolute path on the head node or a shared one, or "
                              "a bucket URI")
    dataset = datasets.load(config.dataset, args.data_dir, train_limit=config.train_limit,
                            test_limit=config.test_limit)
    import ray
    from ray.train import TrainingFailedError
    from ray.train.constants import DEFAULT_STORAGE_PATH

    from orchestrator.training.checkpoint import load_checkpoint
    from orchestrator.driver.printers import EpochPrinter
    from orchestrator.records import (book_line, memory_format_text, memory_text,
                                      step_graph_text, target_line)
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
        cluster = _waited_for_nodes(args, cluster, [config])
        config = plan.fit_run_to_cluster(config, gpu_from_cluster, cluster)
        # Ray Train's own default (~/ray_results) is a local folder as well.
        storage.require_seen_by_every_node(storage_path or DEFAULT_STORAGE_PATH)
        print(f"{config.model}{parameters_text(config)}, "
              f"{counted(config.num_workers, 'worker')} on {workers_text(config)}, "
              f"sync {config.sync}, split {config.split}: "
              f"global batch {config.global_batch_size} = {list(config.batch_sizes_per_worker)} "
              f"per worker, lr {config.lr}, momentum {config.momentum}, "
              f"{config.precision}, {counted(config.num_epochs, 'epoch')} of "
              f"{counted(config.steps_per_epoch, 'step')}"
              + (f", {accumulation_text(config)}" if config.accumulation_steps > 1 else "")
              + (", SyncBatchNorm" if config.sync_batchnorm else "")
              + (", no TF32" if not config.tf32 else "")
              + (f", target test accuracy {config.target_acc:g}"
                 if config.target_acc is not None else "")
              + f", {config.num_train_examples} train / {config.num_test_examples} test images "
              f"of {data_text(config)}")
        memory = memory_line([config])
        if memory:
            print(memory)
        if resumed:
            print(resumed)
        if args.dry_run:
            return RunOutcome(DRY_RUN_LINE, failed=False)
        gpu_memory_bytes = None
        if config.use_gpu:
            gpu_memory_bytes = device_check.require_usable_gpus((config.precision,))
            require_room_in_memory([config], cluster, gpu_memory_bytes, data=dataset)
        if args.check_equivalence:
            from orchestrator.driver import equivalence
            equivalence.require_room(config, cluster, gpu_memory_bytes)
            try:
                verdict = equivalence.run(config, ray.put(dataset), name=f"{name}-equivalence",
                                          storage_path=storage_path)
            except (SystemExit, KeyboardInterrupt):  # Ctrl-C: see below
                return RunOutcome("equivalence: not checked: interrupted (Ctrl-C)",
                                  failed=True, interrupted=True)
            except (TrainingFailedError, equivalence.Diverged) as error:
                reason = (failure_text(error, EQUIVALENCE)
                          if isinstance(error, TrainingFailedError)
                          else str(error))
                return RunOutcome(f"equivalence: not checked: {reason}", failed=True)
            return RunOutcome(verdict.line(config.num_workers), failed=not verdict.agree)
        try:
            result = run_trial(config, ray.put(dataset), name=name,
                               storage_path=storage_path,
                               callbacks=[EpochPrinter(config.num_epochs)])
        except (SystemExit, KeyboardInterrupt):
            # Ctrl-C. In a plain driver Ray Train's fit handles SIGINT: it aborts the
            # run's controller and workers and calls sys.exit, which reaches here from
            # the fit's wait (as SystemExit(1)); nothing else in this process exits
            # there. Before Train's handler is installed, and after the fit puts ours
            # back (interrupts.py), a Ctrl-C is a KeyboardInterrupt. The run keeps its
            # checkpoints; the line says how to resume it.
            return RunOutcome(_interrupted_line(
                config, name, storage.join(storage_path or DEFAULT_STORAGE_PATH, name),
                named=bool(args.name)), failed=True, interrupted=True)
        except TrainingFailedError as error:
            return RunOutcome(
                f"training failed: "
                f"{failure_text(error, RUN, config.batch_size_per_worker, config.precision)}",
                failed=True)
        from orchestrator.report.profile import printed_lines  # pandas: not before Ray starts
        final_line = ("".join(line + "\n" for line in printed_lines(result.return_value))
                      + f"memory format: {memory_format_text(result.return_value[-1])}"
                      f"{step_graph_text(result.return_value[-1])}\n"
                      + book_line(result.return_value)
                      + memory_text(result.return_value, (first_worker_floor_mb(config)
                                                          if config.use_gpu else None)))
        if config.target_acc is not None:
            with result.checkpoint.as_directory() as folder:
                _, _, evaluations = load_checkpoint(Path(folder))
            final_line += "\n" + target_line(evaluations, config.target_acc)
        return RunOutcome(final_line, failed=False)
    finally:
        shut_down(ray)


def _interrupted_line(config, name: str, run_folder: str, *, named: bool) -> str:
    """What a Ctrl-C'd run kept, read from its newest checkpoint as a resume reads
    it (checks.resumed_run_line), and the command that resumes it."""
    from orchestrator.training.checkpoint import read_newest_history
    try:
        found = read_newest_history(run_folder)
    except OSError:
        found = None
    again = "the same command" + ("" if named else f" with --name {name}")
    if not found or not found[0]:
        return (f"interrupted before the first epoch's checkpoint: nothing kept; "
                f"{again} starts it again")
    done = found[0][-1]["epoch"]
    if done >= config.num_epochs:
        return (f"interrupted after the last epoch ({done} of {config.num_epochs}): "
                f"{again} reads its result back from its checkpoint")
    return (f"interrupted after epoch {done} of {config.num_epochs}: {again} resumes "
            f"the run from that epoch's checkpoint")


def sweep(args: argparse.Namespace) -> SweepOutcome:
    """The sweep's Tune experiment, then trials.csv, epochs.csv, report.md and plots."""
    request = checks.sweep_request(args)
    if request.resume and not args.dry_run:
        calibration = stored_calibration(request.out_dir)
        ended = _ended_sweep(request, calibration)
        if ended is not None:
            print(f"every trial of the sweep in {request.out_dir} has ended: its report is "
                  f"rewritten from the stored results, without Ray")
            return write_report(request, request.sweep, ended, calibration,
                                ran_on=request.ran_on, left_out=request.left_out, session=None)
    base = request.sweep.base
    dataset = datasets.load(base.dataset, args.data_dir, train_limit=base.train_limit,
                            test_limit=base.test_limit)
    import ray

    from orchestrator.driver.tune_experiment import run_experiment

    cluster = _connect(args, base)
    try:
        cluster = _waited_for_nodes(args, cluster, [point.train for point in request.sweep.grid])
        sweep_plan = plan.fit_to_cluster(request, cluster)
        storage.require_seen_by_every_node(request.storage)
        sweep = sweep_plan.sweep
        ran_on = {"cluster": cluster.describe(), "timing": timing_line(sweep_plan)}
        if sweep.base.use_gpu and not args.dry_run:  # before anything is written
            require_room_in_memory([point.train for point in sweep.grid], cluster,
                                   device_check.require_usable_gpus(
                                       {point.train.precision for point in sweep.grid}),
                                   data=dataset)
        made_out_dir = False
        if request.resume:
            print(f"resuming the sweep in {request.out_dir} with the options it was started with"
                  + ("; --max-concurrent-trials is its own too (Tune restores it)"
                     if args.max_concurrent_trials is not None else ""))
        elif not args.dry_run:
            made_out_dir = claim_out_dir(request.out_dir, sweep, request.storage,
                                         request.sweep_id,
                                         [cell.to_dict() for cell in sweep_plan.left_out],
                                         ran_on)
        print_plan(sweep_plan)
        trackers = request.trackers
        for line in trackers.lines():
            print(f"tracking: {line}")
        if args.dry_run:
            print(f"results: {request.out_dir}; storage: {request.storage}")
            return SweepOutcome(tables="", paths=[], interrupted=False, failed_trials={},
                                dry_run=True)
        if trackers.tensorboard_command:
            print(trackers.tensorboard_command)  # a line to paste, alone
        started = time.monotonic()
        try:
            calibration = sweep_calibration(request, sweep_plan)
        except (SystemExit, KeyboardInterrupt):  # Ctrl-C, as in train()'s fit
            return _stopped_before_trials(request, made_out_dir)
        except CollectivesFailed as failed:
            return _failed_before_trials(request, made_out_dir, str(failed))
        calibrated = time.monotonic()
        try:
            # Tune's own handler makes a first Ctrl-C end the experiment and the
            # report say so; a second one, while Tune saves its state, reaches here,
            # as does one before Tune's handler is installed.
            result_grid = run_experiment(sweep, ray.put(dataset), storage_path=request.storage,
                                         sweep_id=request.sweep_id,
                                         max_concurrent=sweep_plan.max_concurrent_trials,
                                         resume=request.resume, max_hours=request.max_hours,
                                         trackers=trackers, placements=sweep_plan.placements,
                                         placement_nodes=sweep_plan.placement_nodes)
        except KeyboardInterrupt:
            if not tune_began(request.storage, request.sweep_id):
                return _stopped_before_trials(request, made_out_dir)
            return SweepOutcome.stopped(f"The sweep was interrupted before its report was "
                                        f"written: {RESUME_HINT}.")
        session = Session(started, calibration_s=calibrated - started,
                          trials_s=time.monotonic() - calibrated)
        try:
            return write_report(request, sweep, result_grid, calibration, ran_on=ran_on,
                                left_out=sweep_plan.left_out, session=session)
        except KeyboardInterrupt:  # every file is written whole or not at all
            return SweepOutcome.stopped(f"The sweep was interrupted while its report was "
                                        f"written: {RESUME_HINT}.")
    finally:
        shut_down(ray)


def shut_down(ray) -> None:
    """`ray.shutdown()` once a job has ended, a first Ctrl-C during it held
    (interrupts.first_sigint_held): the job's outcome is whole, and printed."""
    with interrupts.first_sigint_held() as came:
        ray.shutdown()
    if came:
        print(HELD_CTRL_C_LINE, file=sys.stderr)


def _stopped_before_trials(request: checks.SweepRequest, made_out_dir: bool) -> SweepOutcome:
    """Ctrl-C before Tune began (in the calibration): a new sweep's folder is left
    as it was before the command (rundir.release_claim), so that the same command
    starts it again; a resumed one keeps its folder, and resumes it again."""
    if request.resume:
        return SweepOutcome.stopped(f"The sweep was interrupted before its trials "
                                    f"resumed: {RESUME_HINT}.")
    release_claim(request.out_dir, request.storage, request.sweep_id, made_out_dir)
    return SweepOutcome.stopped("The sweep was interrupted before its first trial (in its "
                                "calibration): nothing was kept, and the same command starts "
                                "it again.")


def _failed_before_trials(request: checks.SweepRequest, made_out_dir: bool,
                          why: str) -> SweepOutcome:
    """The calibration's workers could not sum (calibrate.CollectivesFailed): the sweep
    stops before its trials rather than fail each after --collective-timeout; its
    folder as Ctrl-C there leaves it (`_stopped_before_trials`)."""
    if request.resume:
        return SweepOutcome.stopped(f"The sweep stopped before its trials resumed: {why}. "
                                    f"Once they can, {RESUME_HINT}.", interrupted=False)
    release_claim(request.out_dir, request.storage, request.sweep_id, made_out_dir)
    return SweepOutcome.stopped(f"The sweep stopped before its first trial: {why}. Nothing "
                                f"was kept; once they can, the same command starts it again.",
                                interrupted=False)


def _ended_sweep(request: checks.SweepRequest, calibration: dict | None):
    """A resumed sweep with nothing left to run, as Tune's results read from its
    storage alone: every grid point's trial ended without an error (errored ones
    would run again), its calibration (`calibration`, read from calibration.json)
    stored where it needs one, and its cluster's lines kept in sweep.json. None
    where the cluster is needed: a bucket's storage, an older sweep.json, or
    anything left to run."""
    if request.ran_on is None or storage.local_path(request.storage) is None:
        return None
    if calibration is None and calibrates(request.sweep, request.left_out):
        return None
    from orchestrator.driver.tune_results import ended_experiment
    return ended_experiment(request.sweep, request.storage, request.sweep_id)


def _waited_for_nodes(args: argparse.Namespace, cluster: ray_cluster.Cluster,
                      configs) -> ray_cluster.Cluster:
    """`--wait-for-nodes`: the cluster once its autoscaler has started the runs'
    nodes, or the time is up (scale_up.py; the checks settled their GPU use); the
    copies of the code on the nodes that joined checked as the first ones were."""
    if args.wait_for_nodes is None:
        return cluster
    waited = scale_up.wait_for_nodes(cluster, configs, args.wait_for_nodes)
    if waited.node_resources != cluster.node_resources:
        shipped_code.require_shipped_code_on_every_node(waited.shipped)
    return waited


def _short(model: str) -> str:
    """A model's name as a run's name can hold it: a reference's function."""
    return model.rpartition(":")[2]


def _connect(args: argparse.Namespace, config) -> ray_cluster.Cluster:
    """Attach to `--address` / RAY_ADDRESS or start an embedded Ray, and say which;
    `config`'s own model and data set modules go with the job (job_env.py)."""
    cluster = ray_cluster.connect(ray_cluster.requested_address(args.address),
                                  dashboard_host=args.dashboard_host,
                                  user_code=job_env.user_code(config))
    print(cluster.describe())
    for path in cluster.shipped:
        print(f"shipping {path} to every node with the job (py_modules)")
    if cluster.forwarded:
        print(f"setting {', '.join(cluster.forwarded)} as here for every worker (env_vars)")
    if cluster.dashboard_url:
        print(cluster.dashboard_hint)
    return cluster
