"""--tracking and --tracking-uri: checked before Ray starts, carried by sweep.json,
and the trackers' lines (driver/tracking.py); no Ray is started here."""

import os
from pathlib import Path

import pytest

from helpers import refusal, run_main, run_script
from orchestrator.config.grid import SweepConfig
from orchestrator.driver import tracking
from orchestrator.driver.tracking import INSTALL_HINT
from orchestrator.errors import UserError


@pytest.mark.reliability(fault="sweep.py: bad --tracking or --tracking-uri", lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--tracking", "mlflow,neptune"],
     "unknown tracker 'neptune'; choose one or more of mlflow, tensorboard, wandb"),
    (["--tracking", "mlflow,mlflow"], "the list of trackers repeats a value"),
    (["--tracking-uri", "sqlite:///x.db"], "--tracking-uri is where MLflow keeps the runs: add "
                                           "--tracking mlflow"),
    (["--tracking", "mlflow", "--tracking-uri", "sqlite:////proc/no/such/mlflow.db"],
     "--tracking-uri /proc/no/such cannot be created or written"),
    (["--tracking", "mlflow", "--tracking-uri", "file:///proc/no/such/mlruns"],
     "--tracking-uri /proc/no/such/mlruns cannot be created or written"),
    (["--tracking", "mlflow", "--tracking-uri", "sqlite://x.db"], "a SQLite URI is sqlite:///"),
])
def test_bad_tracking_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    out_dir = tmp_path / "out"
    assert fragment in refusal(run_main("sweep.py", *args, "--out", str(out_dir)), out_dir)


@pytest.mark.reliability(fault="sweep.py: --tracking a tracker whose package is not installed",
                         lost="nothing")
@pytest.mark.parametrize("tracker, module", [("mlflow", "mlflow"), ("tensorboard", "tensorboard"),
                                             ("wandb", "wandb"), ("mlflow", "sqlalchemy")])
def test_a_tracker_without_its_package_names_the_extra(tmp_path, tracker, module):
    # A module set to None in sys.modules is one that cannot be imported or found.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(blocker), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", "--tracking", tracker, "--out", str(out_dir), env=env,
                     timeout_s=60)
    assert run.returncode == 2, run.stderr
    assert f"--tracking {tracker}" in run.stderr
    assert f"needs the {module} package: {INSTALL_HINT}" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not out_dir.exists() and not run.stdout


def test_sweep_json_carries_the_trackers():
    sweep = SweepConfig(tracking=("mlflow", "wandb"), tracking_uri="sqlite:///runs.db")
    assert SweepConfig.from_dict(sweep.to_dict()) == sweep
    # One tracker as a string, as a hand-written --config file may give it.
    assert SweepConfig.from_dict({"tracking": "tensorboard"}).tracking == ("tensorboard",)


@pytest.fixture
def no_tracker_env(monkeypatch, tmp_path):
    """No tracker settings from this machine: no URI, no W&B key or login."""
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR",
                 "WANDB_PROJECT", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc from `wandb login`


def _resolve(out_dir: Path, **options) -> tracking.Trackers:
    return tracking.resolve(SweepConfig(**options), out_dir=out_dir,
                            storage_location=str(out_dir / "ray"), sweep_id="out-1234")


def test_mlflow_defaults_to_a_sqlite_file_in_the_sweeps_folder(tmp_path, no_tracker_env,
                                                               monkeypatch):
    out_dir = tmp_path / "out"
    trackers = _resolve(out_dir, tracking=("mlflow",))
    assert trackers.mlflow_uri == f"sqlite:///{out_dir}/mlflow.db"
    assert trackers.lines() == [f"MLflow: experiment out-1234 in sqlite:///{out_dir}/mlflow.db "
                                f"(mlflow ui --backend-store-uri sqlite:///{out_dir}/mlflow.db)"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert _resolve(out_dir, tracking=("mlflow",)).mlflow_uri == "http://mlflow.example:5000"
    # A relative path is made absolute, so that the report names it from anywhere.
    monkeypatch.chdir(tmp_path)
    given = _resolve(out_dir, tracking=("mlflow",), tracking_uri="sqlite:///runs/m.db")
    assert (given.mlflow_uri, given.mlflow_folder) == (f"sqlite:///{tmp_path}/runs/m.db",
                                                       tmp_path / "runs")
    assert _resolve(out_dir, tracking=("mlflow",), tracking_uri="mlruns").mlflow_uri == \
        f"file://{tmp_path}/mlruns"


def test_tensorboard_names_the_experiments_folder_as_a_line_to_paste(tmp_path, no_tracker_env):
    trackers = _resolve(tmp_path, tracking=("tensorboard",))
    assert trackers.tensorboard_command == f"tensorboard --logdir {tmp_path}/ray/out-1234"
    assert trackers.lines() == [f"TensorBoard: event files per trial under {tmp_path}/ray/"
                                f"out-1234 (tensorboard --logdir {tmp_path}/ray/out-1234)"]
    assert _resolve(tmp_path).tensorboard_command is None and _resolve(tmp_path).lines() == []


def test_wandb_runs_offline_without_an_api_key(tmp_path, no_tracker_env, monkeypatch):
    offline = _resolve(tmp_path, tracking=("wandb",))
    assert (offline.wandb_mode, offline.wandb_dir) == ("offline", tmp_path)
    assert "offline in" in offline.lines()[0] and "wandb sync" in offline.lines()[0]
    netrc = tmp_path / "home" / ".netrc"
    netrc.parent.mkdir()
    netrc.write_text("machine api.wandb.ai login user password k3y\n")
    netrc.chmod(0o600)
    assert _resolve(tmp_path, tracking=("wandb",)).wandb_mode == "online"  # `wandb login`'s
    netrc.unlink()
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(UserError, match="WANDB_MODE=online but no W&B API key"):
        _resolve(tmp_path, tracking=("wandb",))
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    assert _resolve(tmp_path, tracking=("wandb",)).lines() == [
        "W&B: project d2l-ray-orchestrator, group out-1234"]
