"""The fast path's guard: which Ray versions and settings get it, and the
switch that turns it off. (tests/cluster/test_ray_fastpath_on_ray.py runs the
stock path it falls back to.)"""

import re
import tomllib

import pytest
from ray.train.torch import TorchTrainer

from helpers import REPO
from orchestrator import ray_fastpath


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


def test_pyproject_pins_ray_to_the_versions_the_fast_path_was_tested_on():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (ray_requirement,) = [dep for dep in dependencies if dep.startswith("ray[")]
    lower, upper = (tuple(map(int, version.split("."))) for version in
                    re.search(r">=(\d+\.\d+),<(\d+\.\d+)", ray_requirement).groups())
    tested = ray_fastpath.TESTED_RAY_VERSIONS
    assert (lower, upper) == (tested[0], (tested[-1][0], tested[-1][1] + 1))
