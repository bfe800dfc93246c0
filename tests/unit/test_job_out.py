"""sweep.py and train.py as the entrypoint of a Ray job (the variable Ray's job
supervisor sets for it): an --out or --storage that Ray would delete with the job
is one line and exit 2, before Ray starts. A real job: tests/cluster/test_job_submit.py."""

import json
import os

import pytest

from helpers import REPO, run_script

TINY = ["--workers", "1", "--epochs", "1", "--train-limit", "2048", "--test-limit", "500",
        "--batch-size", "64"]


@pytest.mark.reliability(fault="sweep.py under `ray job submit` with a relative --out or "
                               "--storage, or neither --out nor a local --storage",
                         lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--out", "results/job-run"], "--out results/job-run is relative"),
    (["--storage", "job-storage"], "--storage job-storage is relative"),
    ([], "the default --out (results/d2l-13.5-"),
])
def test_an_out_the_job_would_delete_is_one_line_and_exit_2(args, fragment):
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0.zip"}, "metadata": {}}
    env = {**os.environ, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job)}
    before = set(os.listdir(REPO))
    run = run_script("sweep.py", *TINY, *args, env=env, timeout_s=60)
    assert run.returncode == 2, run.stderr[-3000:]
    assert fragment in run.stderr and "a temporary copy that Ray may delete once the job ends" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Ray" not in run.stdout  # decided before any Ray started
    assert set(os.listdir(REPO)) == before
    assert not (REPO / "results" / "job-run").exists()


@pytest.mark.reliability(fault="train.py under `ray job submit` with a relative --storage",
                         lost="nothing")
def test_a_train_storage_the_job_would_delete_is_one_line_and_exit_2():
    """A review (2026-12-01): train.py took a relative --storage under a job, and its
    checkpoints landed in the job's temporary working directory, where a later
    `--name` resume would find nothing."""
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0.zip"}, "metadata": {}}
    env = {**os.environ, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job)}
    before = set(os.listdir(REPO))
    run = run_script("train.py", *TINY, "--storage", "job-runs", env=env, timeout_s=60)
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.strip() == (
        "error: --storage job-runs is relative: under `ray job submit` it would land in the "
        "job's working directory, a temporary copy that Ray may delete once the job ends; give "
        "it an absolute path on the head node or a shared one, or a bucket URI")
    assert run.stdout == "" and set(os.listdir(REPO)) == before
