"""calibrate.py's decision where the calibration fails: workers that could not sum
stop the sweep before its trials, in one line, its folder left as Ctrl-C there
leaves it; any other failure only costs the report its scaling model.
(tests/cluster/test_collective_timeout.py: gloo's timeout through a real Ray
Train run, which `collectives_failed` reads as such.)"""

from types import SimpleNamespace

import pytest
from ray.train import WorkerGroupError

from helpers import run_main
from orchestrator.config import cli
from orchestrator.config.grid import SweepConfig
from orchestrator.driver import calibrate, checks, commands, jobs, trial
from orchestrator.driver.rundir import claim_out_dir

GLOO_TIMEOUT = ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                "waiting 1800000ms for recv operation to complete")


def _calibration_failing_with(monkeypatch, error: Exception):
    def run_calibration(sweep, **kwargs):
        raise WorkerGroupError("Training failed", {0: error})
    monkeypatch.setattr(trial, "run_calibration", run_calibration)
    request = SimpleNamespace(storage="/nowhere", sweep_id="out-1234")
    return request, SimpleNamespace(sweep=SweepConfig(workers=(1, 4)), placements=None)


def test_workers_that_could_not_sum_stop_the_sweep_before_its_trials(monkeypatch):
    request, sweep_plan = _calibration_failing_with(monkeypatch, RuntimeError(GLOO_TIMEOUT))
    with pytest.raises(calibrate.CollectivesFailed) as failed:
        calibrate._run_calibration(request, sweep_plan)
    assert str(failed.value).startswith(
        "its calibration's 4 workers could not sum their gradients, nor would its trials of "
        "as many: rank 0: RuntimeError: ") and "(a rank waited --collective-timeout" in str(
        failed.value), failed.value


def test_another_failure_costs_the_report_its_scaling_model_only(monkeypatch, capsys):
    request, sweep_plan = _calibration_failing_with(monkeypatch, ValueError("a probe's shape"))
    assert calibrate._run_calibration(request, sweep_plan) is None
    assert capsys.readouterr().out.startswith(
        "calibration failed, the report will have no scaling model: rank 0: ValueError")


def test_a_sweep_stopped_so_leaves_no_folder_and_exits_1(tmp_path, monkeypatch):
    out_dir = tmp_path / "out"
    request = checks.sweep_request(cli.sweep_parser("").parse_args(["--out", str(out_dir)]))
    made = claim_out_dir(out_dir, SweepConfig(workers=(1, 2)), request.storage, request.sweep_id)
    outcome = jobs._failed_before_trials(request, made, "its calibration's 2 workers could not "
                                                        "sum their gradients")
    assert not out_dir.exists() and not outcome.interrupted
    assert outcome.stopped_line == (
        "The sweep stopped before its first trial: its calibration's 2 workers could not sum "
        "their gradients. Nothing was kept; once they can, the same command starts it again.")
    monkeypatch.setattr(jobs, "sweep", lambda args: outcome)
    run = run_main("sweep.py", "--out", str(out_dir))
    assert run.returncode == commands.EXIT_TRIALS_FAILED == 1
    assert run.stderr.strip() == outcome.stopped_line
