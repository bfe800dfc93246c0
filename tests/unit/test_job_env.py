"""What an attached job ships and where a sweep's results go under `ray job
submit`, decided from the environment Ray's job supervisor gives its
entrypoint (RAY_JOB_CONFIG_JSON_ENV_VAR), before Ray is touched. The real
job and the real shipping: tests/cluster/test_job_submit.py and
test_code_shipping.py."""

import json
from pathlib import Path

import pytest

from orchestrator.driver import job_env
from orchestrator.driver.rundir import out_dir_for
from orchestrator.errors import UserError

OURS = {"ORCHESTRATOR_RAY_FAST_PATH": "1"}


def _as_job(monkeypatch, runtime_env: dict) -> None:
    monkeypatch.setenv(job_env.RAY_JOB_CONFIG_ENV_VAR,
                       json.dumps({"runtime_env": runtime_env, "metadata": {}}))


def test_attached_outside_a_job_the_package_ships_without_its_bytecode(monkeypatch):
    monkeypatch.delenv(job_env.RAY_JOB_CONFIG_ENV_VAR, raising=False)
    monkeypatch.delenv(job_env.SHIP_CODE_ENV_VAR, raising=False)
    assert job_env.attached_runtime_env(OURS) == {
        "env_vars": OURS, "py_modules": [str(job_env.PACKAGE_DIR)], "excludes": ["__pycache__"]}
    assert (job_env.PACKAGE_DIR / "driver" / "job_env.py").is_file()
    monkeypatch.setenv(job_env.SHIP_CODE_ENV_VAR, "0")
    assert job_env.attached_runtime_env(OURS) == {"env_vars": OURS}


def test_under_a_job_what_the_job_sets_is_left_to_it(monkeypatch, tmp_path):
    monkeypatch.delenv(job_env.SHIP_CODE_ENV_VAR, raising=False)
    # Ray refuses to merge a key or a variable set twice: neither is set again.
    _as_job(monkeypatch, {"env_vars": {"ORCHESTRATOR_RAY_FAST_PATH": "0"},
                          "py_modules": ["gcs://_ray_pkg_abc.zip"]})
    assert job_env.attached_runtime_env(OURS) == {"env_vars": {}}
    # A working_dir elsewhere (the driver's package is not in the job's copy): shipped.
    monkeypatch.chdir(tmp_path)
    _as_job(monkeypatch, {"working_dir": "gcs://_ray_pkg_def.zip", "excludes": [".cache"]})
    assert job_env.attached_runtime_env(OURS) == {
        "env_vars": OURS, "py_modules": [str(job_env.PACKAGE_DIR)]}
    # `--working-dir .` from the checkout: the driver runs in the job's copy,
    # its package with it, and every worker gets that copy.
    monkeypatch.chdir(job_env.PACKAGE_DIR.parent)
    assert job_env.attached_runtime_env(OURS) == {"env_vars": OURS}


def test_out_outside_a_job_is_relative_to_here(monkeypatch, tmp_path):
    monkeypatch.delenv(job_env.RAY_JOB_CONFIG_ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert out_dir_for("run1", "d2l-13.5", None) == tmp_path / "run1"
    default = out_dir_for(None, "d2l-13.5", None)
    assert default.parent == tmp_path / "results" and default.name.startswith("d2l-13.5-")


def test_out_under_a_job_is_absolute_or_under_a_local_storage(monkeypatch, tmp_path):
    _as_job(monkeypatch, {"working_dir": "gcs://_ray_pkg_def.zip"})
    assert out_dir_for(str(tmp_path / "run1"), "d2l-13.5", None) == tmp_path / "run1"
    assert out_dir_for(str(tmp_path / "run1"), "d2l-13.5", "s3://b/p") == tmp_path / "run1"
    default = out_dir_for(None, "scaling", str(tmp_path / "storage"))
    assert default.parent == tmp_path / "storage" / "results"
    assert default.name.startswith("scaling-")


@pytest.mark.parametrize("out, storage, fragment", [
    ("results/run1", None, "--out results/run1 is relative: under `ray job submit`"),
    (None, "shared/d2l", "--storage shared/d2l is relative: under `ray job submit`"),
    (None, None, "under `ray job submit` the default --out (results/d2l-13.5-"),
    (None, "s3://bucket/d2l", "under `ray job submit` the default --out (results/d2l-13.5-"),
])
def test_out_under_a_job_that_would_be_deleted_with_it_is_refused(monkeypatch, out, storage,
                                                                  fragment):
    _as_job(monkeypatch, {})
    with pytest.raises(UserError) as refused:
        out_dir_for(out, "d2l-13.5", storage)
    assert fragment in str(refused.value)
    assert "give --out an absolute path" in str(refused.value)
    assert not Path("results/run1").exists()


def test_the_drivers_settings_of_the_collectives_go_to_every_worker(monkeypatch):
    """A review (2026-11-29): on an attached cluster a worker takes its environment
    from its node's raylet, so NCCL_SOCKET_IFNAME set where the sweep starts (as
    torchrun's workers would inherit it) never reached them; a wrong interface
    shows as a hang until the process group's timeout."""
    environ = {"NCCL_SOCKET_IFNAME": "eth0", "TORCH_NCCL_BLOCKING_WAIT": "1",
               "GLOO_SOCKET_IFNAME": "eth0", "PATH": "/bin", "NCCLX": "no"}
    assert job_env.forwarded_env(environ) == {
        "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_BLOCKING_WAIT": "1"}
    # Under `ray job submit` the driver's environment is the head node's, not the
    # user's shell: nothing is forwarded (the job's own runtime env sets them).
    _as_job(monkeypatch, {"env_vars": {"NCCL_SOCKET_IFNAME": "ib0"}})
    assert job_env.forwarded_env(environ) == {}
