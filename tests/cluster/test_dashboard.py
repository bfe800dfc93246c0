"""The dashboard of a sweep's embedded Ray: its line says how to get the
token, and its Train API lists every run of the sweep with its status; the
same sweep's `--repeats` (one sweep for both: each costs its Ray and trials)."""

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from helpers import REPO, hang_limit, read_until

RAY_CLI = os.path.join(os.path.dirname(sys.executable), "ray")
# Ray Train V2's runs; in Ray 2.60 /api/train/v2/runs serves Train V1's.
TRAIN_RUNS_API = "/api/train/v2/runs/v1"


def _get(url: str, token: str | None) -> tuple[int, str]:
    """The status and text of a GET; (0, why) where no answer came in time: the
    dashboard shares a machine's cores with the sweep's trials, and on a 2-core
    CPU without AVX-512 its Train API once took over 10 s to answer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=hang_limit(10)) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (TimeoutError, urllib.error.URLError) as error:
        return 0, str(error)


@pytest.fixture(scope="module")
def listed_sweep(tmp_path_factory) -> tuple[list[dict], Path]:
    """A sweep of one point run twice (`--repeats 2`: seeds 0 and 1), whose Train
    runs are listed through its dashboard while it runs. Returns the listing and
    the results folder."""
    out_dir = tmp_path_factory.mktemp("listed") / "out"
    sweep = subprocess.Popen(
        [sys.executable, "-u", str(REPO / "experiments" / "sweep.py"), "--workers", "1",
         "--lr", "0.1", "--repeats", "2", "--batch-size", "64", "--epochs", "1",
         "--train-limit", "2048", "--test-limit", "500", "--no-calibrate", "--out", str(out_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    lines: list[str] = []
    # Read all along, so that a full pipe never stalls the sweep.
    reader = threading.Thread(target=lambda: lines.extend(sweep.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + hang_limit(120)
        while not (line := next((line for line in lines if "Ray dashboard: " in line), None)):
            assert sweep.poll() is None and time.monotonic() < deadline, "".join(lines[-40:])
            time.sleep(0.2)
        assert "`ray get-auth-token`" in line
        url = re.search(r"Ray dashboard: (http://\S+)", line).group(1)
        token = subprocess.run([RAY_CLI, "get-auth-token"], capture_output=True, text=True,
                               check=True).stdout.strip()
        refused = _get(url + TRAIN_RUNS_API, None)
        while refused[0] == 0 and sweep.poll() is None:  # no answer in time: ask again
            time.sleep(0.5)
            refused = _get(url + TRAIN_RUNS_API, None)
        assert refused[0] == 401, refused  # the token is what lets one in
        runs: list[dict] = []
        while len(runs) < 2:
            assert sweep.poll() is None, "the sweep ended before its runs were listed:\n" + \
                "".join(lines[-40:])
            status, text = _get(url + TRAIN_RUNS_API, token)
            if status == 200:
                runs = json.loads(text)["train_runs"]
            time.sleep(0.5)
        assert sweep.wait(timeout=hang_limit(600)) == 0, "".join(lines[-40:])
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    reader.join(timeout=10)
    return runs, out_dir


def test_the_train_api_lists_every_run_of_a_running_sweep_with_its_status(listed_sweep):
    runs, out_dir = listed_sweep
    # One Train run per trial, named after it, each with a status.
    trials = pd.read_csv(out_dir / "trials.csv")
    assert sorted(run["name"] for run in runs) == sorted(trials["trial_id"])
    assert all(run["status"] for run in runs), runs


def test_repeats_run_every_point_once_per_seed(listed_sweep):
    """--repeats N: every point once per seed, the seed in trials.csv, and the
    report's tables averaging the replicas (issue 31)."""
    _, out_dir = listed_sweep
    trials = pd.read_csv(out_dir / "trials.csv")
    assert sorted(trials["seed"]) == [0, 1] and (trials["status"] == "finished").all()
    report = (out_dir / "report.md").read_text()
    assert "Each row is the mean over its `trials`" in report
    assert "Each number says how many seeds (replicas) it is the mean of" in report


# Imports what starting Ray needs, says "ready" and waits for "go" on stdin;
# then starts an embedded Ray the way the scripts do, and prints its
# dashboard's address and the HTTP status it answered with.
_START_AT_ONCE = """
import sys, urllib.error, urllib.request
import ray
from orchestrator import ray_fastpath  # what connect() imports: outside the race
from orchestrator.driver import cluster
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":  # the test gave up: start nothing
    sys.exit(1)
url = cluster.connect(None, num_cpus=1).dashboard_url
try:
    status = urllib.request.urlopen(url + "/api/version", timeout=10).status
except urllib.error.HTTPError as error:
    status = error.code  # 401 without Ray's token: still this dashboard answering
print("dashboard", url, status, flush=True)
ray.shutdown()
"""


def test_two_embedded_rays_started_at_once_each_get_a_dashboard():
    # Both probed the same free port and the later dashboard could not bind it
    # ("Failed to find a valid port for dashboard"): reproduced both times tried
    # on a 2-core EPYC before the port was chosen under a lock.
    runs = [subprocess.Popen([sys.executable, "-c", _START_AT_ONCE], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    try:
        for run in runs:  # both have imported Ray (a warning may come first): then both start
            read_until(run, r"^ready$", 180, [])
        for run in runs:
            run.stdin.write("go\n")
            run.stdin.flush()
        outputs = [run.communicate(timeout=hang_limit(180))[0] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-2000:]
    urls = [re.search(r"^dashboard (\S+) (?:200|401)$", output, re.M).group(1) for output in outputs]
    assert len(set(urls)) == 2, urls
