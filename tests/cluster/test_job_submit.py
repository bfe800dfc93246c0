"""`ray job submit`, as docs/CLUSTERS.md gives it, to a head started with
`ray start`: the job ends SUCCEEDED and its results are where the docs say
(an absolute --out, or under a local --storage), not in the job's working
directory, a temporary copy; a relative --out fails the job with one line."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from helpers import DASHBOARD_AGENT_PORT, REPO, STOP_AT_ONCE, hang_limit
from orchestrator.config.presets import DEFAULT_PRESET
from orchestrator.driver.cluster import free_local_port


RAY_CLI = str(Path(sys.executable).with_name("ray"))
PORT_RANGE_START = 20000  # below the ephemeral range (32768 and up), where Ray binds its own
# The command of docs/CLUSTERS.md, up to the sweep's options, with the port of this head.
SUBMIT = "ray job submit --address http://127.0.0.1:{port} --working-dir . -- python " \
         "experiments/sweep.py"
TINY = ["--workers", "1", "--lr", "0.1", "--epochs", "1", "--train-limit", "2048",
        "--test-limit", "500", "--batch-size", "64", "--no-calibrate"]


@contextlib.contextmanager
def _head():
    """A one-CPU head on 127.0.0.1 (`ray start --head --block`, its own ports and
    --temp-dir), whose Python is this one, as a user's cluster runs in their venv;
    stopped by its own handle. Yields (dashboard port, environment, temp dir)."""
    # Away from Ray's defaults, which other clusters of this machine prefer: a
    # port two of them probe at once could go to theirs, and the jobs with it.
    base_port = PORT_RANGE_START + os.getpid() % 1000 * 10
    port = free_local_port(preferred=base_port)
    dashboard_port = free_local_port(preferred=base_port + 5)
    temp_dir = tempfile.mkdtemp(prefix="d2ljob")  # short: Ray's sockets live under it
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           # Room for Train's two helper actors beside the worker (docs/CLUSTERS.md).
           "RAY_worker_maximum_startup_concurrency": "3", **STOP_AT_ONCE}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [RAY_CLI, "start", "--block", "--head", f"--port={port}", "--num-cpus=1",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard_port}", f"--temp-dir={temp_dir}",
         f"--dashboard-agent-listen-port={free_local_port(preferred=DASHBOARD_AGENT_PORT)}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + hang_limit(120)
        # The job API answers once the dashboard is up.
        while not (_served_by(head.pid, dashboard_port) and subprocess.run(
                [RAY_CLI, "job", "list", "--address", f"http://127.0.0.1:{dashboard_port}"],
                env=env, capture_output=True).returncode == 0):
            assert head.poll() is None and time.monotonic() < deadline, "the head did not start"
            time.sleep(1)
        yield dashboard_port, env, Path(temp_dir)
    finally:
        head.terminate()
        head.wait(timeout=60)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _served_by(head_pid: int, port: int) -> bool:
    """Whether a process of this head (its dashboard) listens on `port`."""
    listing = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True,
                             text=True).stdout
    return any(head_pid in _ancestors(int(pid)) for pid in re.findall(r"pid=(\d+)", listing))


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1:
        try:
            # The parent's id is the 2nd field after the ")" that ends the command's name.
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        found.add(pid)
    return found


def _submit(head: tuple[int, dict, Path], *sweep_args: str) -> tuple[str, str]:
    """The docs' command with these sweep options, run in the checkout until the
    job ends; returns the job's status as `ray job status` gives it (SUCCEEDED,
    FAILED) and the job's output."""
    dashboard_port, env, temp_dir = head
    command = SUBMIT.format(port=dashboard_port).split() + list(sweep_args)
    submit = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=hang_limit(600))
    output = submit.stdout + submit.stderr
    job_id = re.search(r"Job '(raysubmit_\w+)' submitted successfully", output)
    assert job_id, output[-3000:]
    # It ran on this head: its driver's log is in the head's session folder.
    assert (temp_dir / "session_latest" / "logs" / f"job-driver-{job_id[1]}.log").is_file()
    status = subprocess.run([RAY_CLI, "job", "status", "--address",
                             f"http://127.0.0.1:{dashboard_port}", job_id[1]], env=env,
                            capture_output=True, text=True)
    # Its words for a job that ended: "Job 'raysubmit_...' succeeded" (or failed).
    said = re.sub(r"\x1b\[[0-9;]*m", "", status.stdout + status.stderr)
    ended = re.search(rf"Job '{job_id[1]}' (succeeded|failed)", said)
    assert ended, said
    return {"succeeded": "SUCCEEDED", "failed": "FAILED"}[ended[1]], output


def test_a_submitted_sweep_succeeds_and_its_results_outlive_the_job(tmp_path):
    # The docs' command is the one tested here (its lines joined as the shell joins them).
    docs = " ".join((REPO / "docs" / "CLUSTERS.md").read_text().replace("\\\n", " ").split())
    assert SUBMIT.format(port=8265) in docs
    with _head() as head:
        temp_dir = head[2]
        out_dir = tmp_path / "out"
        status, output = _submit(head, *TINY, "--out", str(out_dir))
        assert status == "SUCCEEDED", output[-3000:]
        for name in ("report.md", "trials.csv", "epochs.csv"):
            assert (out_dir / name).stat().st_size > 0, name

        # No --out: under the local --storage.
        storage = tmp_path / "storage"
        status, output = _submit(head, *TINY, "--storage", str(storage))
        assert status == "SUCCEEDED", output[-3000:]
        (default_out,) = (storage / "results").iterdir()
        assert default_out.name.startswith(f"{DEFAULT_PRESET}-")
        for name in ("report.md", "trials.csv"):
            assert (default_out / name).stat().st_size > 0, name

        # A relative --out would land in the job's working directory: refused.
        status, output = _submit(head, *TINY, "--out", "results/job-run")
        assert status == "FAILED", output[-3000:]
        assert ("--out results/job-run is relative: under `ray job submit` it would land in "
                "the job's working directory") in output
        assert "Traceback" not in output
        assert not (REPO / "results" / "job-run").exists()

        # No sweep's folder in the jobs' working directories (the head's session
        # folder): each sweep claims its folder with a sweep.json.
        assert list(temp_dir.glob("session_latest/runtime_resources/working_dir_files/*"))
        assert not list(temp_dir.rglob("sweep.json")), list(temp_dir.rglob("sweep.json"))
