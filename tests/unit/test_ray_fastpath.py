"""The fast path's guard: which Ray versions and settings get it, and the
switch that turns it off. (tests/cluster/test_ray_fastpath_on_ray.py runs the
stock path it falls back to.)"""

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from ray.train.torch import TorchTrainer

from helpers import REPO, hang_limit
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


# Callbacks of each kind Ray's usage tag tells apart: the trackers' names, Tune's
# default loggers, a logger and a callback of one's own, and an object that is none.
CALLBACKS = """
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, LoggerCallback

class Own(Callback):
    pass

class OwnLogger(LoggerCallback):
    pass

callbacks = [type("MLflowLoggerCallback", (LoggerCallback,), {})(), CSVLoggerCallback(),
             CSVLoggerCallback(), Own(), OwnLogger(), object(),
             type("WandbLoggerCallback", (LoggerCallback,), {})()]
"""


def test_tunes_usage_tag_is_rays_without_importing_the_trackers():
    """Ray's `tag_callbacks` imports mlflow and wandb (2 s on a 2-core CPU) to learn
    four class names; the fast path's records the same tag without them, in a
    Python of its own (this one may have imported them)."""
    code = CALLBACKS + """
import json, sys
from ray._common.usage import usage_lib
from ray.air._internal import usage
from orchestrator import ray_fastpath

ray_fastpath.light_usage_tags()
usage.tag_callbacks(callbacks)
print(json.dumps({"imported": sorted({"mlflow", "wandb"} & set(sys.modules)),
                  "tag": usage_lib._recorded_extra_usage_tags["air_callbacks"]}))
"""
    env = {name: value for name, value in os.environ.items()
           if name != ray_fastpath.SWITCH_ENV_VAR}  # on, whatever this run's switch
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env=env, timeout=hang_limit(120))
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["imported"] == []
    from ray.air._internal.usage import _count_callbacks
    namespace = {}
    exec(CALLBACKS, namespace)
    assert seen["tag"] == json.dumps(_count_callbacks(namespace["callbacks"]))  # Ray's own
    assert json.loads(seen["tag"]) == {"MLflowLoggerCallback": 1, "CSVLoggerCallback": 2,
                                       "CustomCallback": 1, "CustomLoggerCallback": 1,
                                       "WandbLoggerCallback": 1}


def test_the_switch_leaves_rays_usage_tag_as_it_is(monkeypatch):
    from ray.air._internal import usage

    def original(callbacks):  # Ray's, as it stands before any sweep in this process ran
        return True

    # Restored after. Not the attribute as found: a sweep run earlier in this process
    # (tests/cluster, when a session runs it before this file) puts the light count there.
    monkeypatch.setattr(usage, "tag_callbacks", original)
    monkeypatch.setenv(ray_fastpath.SWITCH_ENV_VAR, "0")
    ray_fastpath.light_usage_tags()
    assert usage.tag_callbacks is original
    monkeypatch.delenv(ray_fastpath.SWITCH_ENV_VAR)
    ray_fastpath.light_usage_tags()
    assert usage.tag_callbacks is not original and not usage.tag_callbacks([])


def test_the_usage_tag_counts_rays_own_tracker_classes_by_their_names():
    """Against the classes themselves, which Ray's count imports."""
    from ray.air._internal.usage import _count_callbacks
    from ray.air.integrations.comet import CometLoggerCallback
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.air.integrations.wandb import WandbLoggerCallback
    from ray.tune.logger.aim import AimLoggerCallback
    namespace = {}
    exec(CALLBACKS, namespace)
    # Unconfigured: each class under its own name, without its __init__ or __del__.
    trackers = [object.__new__(type(cls.__name__, (cls,), {"__del__": lambda self: None}))
                for cls in (CometLoggerCallback, MLflowLoggerCallback, WandbLoggerCallback,
                            AimLoggerCallback)]
    callbacks = [*namespace["callbacks"], *trackers]
    assert ray_fastpath.count_callbacks(callbacks) == dict(_count_callbacks(callbacks))
    assert {type(tracker).__name__ for tracker in trackers} == set(
        ray_fastpath.TRACKER_CALLBACK_NAMES)
