"""The driver's side of the sweep's microbenchmark (training/calibration.py):
whether the sweep runs it, run once on a worker group of its largest trial,
and kept beside its results in calibration.json, which a resumed sweep reads."""

import json
from pathlib import Path

from orchestrator.driver import checks, plan
from orchestrator.driver.failures import CALIBRATION, collectives_failed, failure_text
from orchestrator.driver.rundir import CALIBRATION_FILE
from orchestrator.records import write_atomically


class CollectivesFailed(Exception):
    """The calibration's workers could not sum their gradients (a collective timed
    out, or NCCL could not start): the trials of as many workers, placed as they
    were, would fail the same way, each after as long."""


def sweep_calibration(request: checks.SweepRequest, sweep_plan: plan.SweepPlan) -> dict | None:
    """The sweep's microbenchmark (calibration.py), run once: a resumed sweep reads
    its calibration.json. None for a sweep of one worker count that runs every
    point (nothing to model), or one told not to calibrate; a sweep of single
    workers with points left out needs their gradient bytes alone, counted here.
    CollectivesFailed where the workers could not sum (the sweep stops there)."""
    sweep = sweep_plan.sweep
    stored = stored_calibration(request.out_dir)
    if stored is not None or not calibrates(sweep, sweep_plan.left_out):
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
    """The microbenchmark on a worker group of the sweep's largest trial; None if it
    failed, CollectivesFailed where its workers could not sum."""
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
        if collectives_failed(error):
            raise CollectivesFailed(
                f"its calibration's {max(sweep.workers)} workers could not sum their gradients, "
                f"nor would its trials of as many: {failure_text(error, CALIBRATION)}") from None
        print(f"calibration failed, the report will have no scaling model: "
              f"{failure_text(error, CALIBRATION)}")
        return None
    return measured


def calibrates(sweep, left_out) -> bool:
    """Whether the sweep runs its microbenchmark: for two or more worker counts, or
    for points left out, which are estimated from the 1-worker trial and the
    gradient bytes it records (even where one worker count runs); unless told not to."""
    return sweep.calibrate and (len(set(sweep.workers)) >= 2 or bool(left_out))


def stored_calibration(out_dir: Path) -> dict | None:
    path = out_dir / CALIBRATION_FILE
    return json.loads(path.read_text()) if path.exists() else None
