"""A sweep's files from its Tune results: trials.csv, epochs.csv, report.md,
plots and answers (report/ writes them; here the frames, the title's lines
and every session's times, kept in sessions.json), and what the command
prints of them (`SweepOutcome`)."""

import datetime
import json
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.driver import checks
from orchestrator.driver.plan_text import accumulation_text, data_text
from orchestrator.records import counted, write_atomically

RESUME_HINT = ("run the same command with --resume to finish it and write its report "
               "(finished trials are kept)")


@dataclass(frozen=True)
class SweepOutcome:
    tables: str
    """The scaling and learning-rate tables, as printed at the end."""
    paths: list[Path]
    interrupted: bool
    """A Ctrl-C (exit 130): some trial did not end, and the same command with --resume
    finishes the sweep; or it stopped before its trials (`stopped_line`)."""
    failed_trials: dict[str, str]  # trial id: its error, one line
    dry_run: bool = False
    """--dry-run: the plan was printed, and nothing else done."""
    stopped_line: str = ""
    """Ctrl-C where no report could be written (before the trials, or a second one while
    Tune saved its state, or in the report), or workers that could not sum before the
    trials (not `interrupted`): the one line saying what was kept."""

    @classmethod
    def stopped(cls, line: str, interrupted: bool = True) -> "SweepOutcome":
        return cls(tables="", paths=[], interrupted=interrupted, failed_trials={},
                   stopped_line=line)


def write_report(request: checks.SweepRequest, sweep, result_grid, calibration: dict | None, *,
                 ran_on: dict[str, str], left_out, session: "Session | None") -> SweepOutcome:
    """trials.csv, epochs.csv, report.md, plots and answers from the sweep's Tune
    results; `session`: this one's times, None where nothing ran (a rewrite)."""
    from orchestrator.driver.tune_results import collect, trials_not_ended
    from orchestrator.report import write_sweep_report

    base, trackers = sweep.base, request.trackers
    trials, epochs, evaluations, profiled = collect(result_grid, sweep, request.storage,
                                                    sweep_id=request.sweep_id)
    sessions = _record_session(request.out_dir, session)
    # Tune's count; the report adds trials whose epochs say they did not end.
    not_ended = trials_not_ended(result_grid, sweep)
    title = [f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
             f"- cluster: {ran_on['cluster']}",
             f"- {'exercises study (orchestrator/config/studies.py) over ' if sweep.study == 'exercises' else ''}"
             f"grid: workers {list(sweep.workers)}, batch {list(sweep.batch_sizes)} "
             f"({sweep.batch_scaling}), lr {list(sweep.lrs)} (scaling {sweep.lr_scaling}), "
             f"momentum {list(sweep.momentums)}, {counted(base.num_epochs, 'epoch')}, "
             f"model {base.model}, sync {list(sweep.sync)}, split {list(sweep.split)}, "
             f"precision {list(sweep.precision)}"
             + (f", {accumulation_text(base)}" if base.accumulation_steps > 1 else ""),
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
                                left_out=left_out, sessions=sessions, not_ended=not_ended,
                                profiled=profiled)
    interrupted = bool(not_ended or report.interrupted_trials)
    return SweepOutcome(tables=report.tables, paths=list(report.paths.values()),
                        interrupted=interrupted, failed_trials=report.failed_trials)


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


def _data_note(base) -> str:
    """What the report says of data subsets (--quick, --train-limit); empty on full data."""
    if base.train_limit is None and base.test_limit is None:
        return ""
    return (f"{base.num_train_examples} training / {base.num_test_examples} test images, "
            f"{counted(base.num_epochs, 'epoch')}")
