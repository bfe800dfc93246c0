"""The fast path's guard, and the stock path it falls back to: a plain
TorchTrainer, and in a sweep Ray's TuneReportCallback, so that it cannot rot."""

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib

import pandas as pd
import pytest
from ray.train.torch import TorchTrainer

from helpers import REPO, run_script
from orchestrator import ray_fastpath

STOCK_ENV = {**os.environ, ray_fastpath.SWITCH_ENV_VAR: "0"}

# One fit inside an actor, as a Tune trial fits, on an embedded Ray of its
# own: the stock path's detached autoscaling coordinator would otherwise stay
# in the session's Ray, where test_trial checks that none was started.
STOCK_FIT = textwrap.dedent("""
    import json, sys
    import ray
    from orchestrator.driver import cluster
    from orchestrator.training import data
    from orchestrator.config.options import TrainConfig
    from orchestrator.driver.trial import run_trial
    from helpers import num_actors

    @ray.remote(num_cpus=0)
    def fit(data_refs, storage_path):
        config = TrainConfig(global_batch_size=128, num_epochs=1, train_limit=256, test_limit=100)
        result = run_trial(config, data_refs[0], name="stock", storage_path=storage_path,
                           max_failures=0)
        return [row["epoch"] for row in result.return_value]

    # Asked by its own address: the test session's Ray runs on this machine too.
    dashboard = cluster.connect(None, num_cpus=2).dashboard_url
    epochs = ray.get(fit.remote([ray.put(data.load(train_limit=256, test_limit=100))], sys.argv[1]))
    print(json.dumps({"epochs": epochs, "controllers": num_actors("TrainController", dashboard)}))
    ray.shutdown()
""")


@pytest.mark.parametrize("version", ["2.59.0", "2.61.0", "3.0.0", "3.0.0.dev0"])
def test_an_untested_ray_version_gets_the_stock_path(version):
    assert not ray_fastpath.enabled(version)


def test_the_switch_turns_the_fast_path_off(monkeypatch):
    tested = ".".join(map(str, ray_fastpath.TESTED_RAY_VERSIONS[0])) + ".0"
    monkeypatch.delenv(ray_fastpath.SWITCH_ENV_VAR, raising=False)
    assert ray_fastpath.enabled(tested)
    monkeypatch.setenv(ray_fastpath.SWITCH_ENV_VAR, "0")
    assert not ray_fastpath.enabled(tested)
    assert ray_fastpath.trainer_class() is TorchTrainer
    # Every process of the job learns the driver's choice.
    assert ray_fastpath.job_env_vars(embedded=True) == {ray_fastpath.SWITCH_ENV_VAR: "0"}
    assert ray_fastpath.embedded_init_kwargs(num_cpus=2) == {}


@pytest.mark.cluster
def test_the_stock_path_fits_in_an_actor_with_rays_controller_actor(tmp_path):
    run = subprocess.run([sys.executable, "-c", STOCK_FIT, str(tmp_path)], capture_output=True,
                         text=True, timeout=300, env={**STOCK_ENV, "PYTHONPATH": str(REPO / "tests")},
                         cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["epochs"] == [1]
    # The fast path would have run the controller in the fitting actor.
    assert outcome["controllers"] == 1


@pytest.mark.cluster
def test_a_sweep_on_the_stock_path_finishes_also_when_asha_stops_trials(tmp_path):
    # lr 0.2 learns (see test_sweep_processes); ASHA ends it at its last rung
    # (epoch 2) while its stock fit is still shutting down, and stops or
    # finishes 0.001. A stock trial's process is not reused: the next trial
    # used to fail waiting for it, and the sweep hung.
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", "--workers", "1", "--lr", "0.2,0.001", "--batch-size", "16",
                     "--epochs", "2", "--train-limit", "8192", "--test-limit", "500",
                     "--scheduler", "asha", "--max-concurrent-trials", "1",
                     "--out", str(out_dir), env=STOCK_ENV, timeout_s=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_csv(out_dir / "trials.csv").set_index("base_lr")
    assert trials.loc[0.2, "status"] == "finished" and trials.loc[0.2, "epochs_run"] == 2
    assert trials.loc[0.001, "status"] in ("finished", "stopped early")


def test_pyproject_pins_ray_to_the_versions_the_fast_path_was_tested_on():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (ray_requirement,) = [dep for dep in dependencies if dep.startswith("ray[")]
    lower, upper = (tuple(map(int, version.split("."))) for version in
                    re.search(r">=(\d+\.\d+),<(\d+\.\d+)", ray_requirement).groups())
    tested = ray_fastpath.TESTED_RAY_VERSIONS
    assert (lower, upper) == (tested[0], (tested[-1][0], tested[-1][1] + 1))
