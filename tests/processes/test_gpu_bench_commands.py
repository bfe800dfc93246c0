"""The benchmark scripts run as commands, each a process of its own or more: the
CPU smoke runs of bench/gpu.py and bench/gpu_step.py (neither may touch
bench/results: a smoke run's figures are not a measurement), the torchrun
baseline that bench/gpu_check.py compares a Ray trial with, and the check's
step stopped whole when it runs over its limit. What only parses options or
finds no GPU: tests/unit/test_bench_gpu.py."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import REPO, import_bench

SCRIPT = REPO / "bench" / "gpu.py"
RESULTS = REPO / "bench" / "results" / "gpu.jsonl"


def _bench_record(*args: str) -> dict:
    before = RESULTS.read_bytes() if RESULTS.exists() else None
    finished = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO, check=True)
    assert (RESULTS.read_bytes() if RESULTS.exists() else None) == before
    (line,) = [line for line in finished.stdout.splitlines() if line.startswith("BENCH ")]
    return json.loads(line.removeprefix("BENCH "))


def test_a_cpu_smoke_run_prints_its_figures_and_records_nothing():
    record = _bench_record("--device", "cpu", "--models", "lenet", "--epochs", "2",
                           "--train-limit", "512", "--test-limit", "200")
    assert record["ran"] and record["device_name"].startswith("cpu (smoke run")
    assert record["lenet_epochs_run"] == 2 and record["lenet_epoch_s"] > 0
    assert 0 <= record["lenet_test_acc"] <= 1
    assert record["target_met"] == "not judged: ResNet-18 was not run"


def test_gpu_step_smoke_runs_on_a_cpu_and_records_nothing():
    """bench/gpu_step.py's CPU smoke run: the eager ways and the project's loop timed,
    the graph ways skipped (they need CUDA), bench/results untouched."""
    results = REPO / "bench" / "results" / "gpu_step.jsonl"
    before = results.read_bytes()
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_step.py"), "--device", "cpu", "--models",
         "lenet", "--ways", "eager,graph,project", "--steps", "1", "--repeats", "1",
         "--warmup", "1"], capture_output=True, text=True, timeout=300, cwd=REPO, check=True)
    assert results.read_bytes() == before
    (line,) = [line for line in finished.stdout.splitlines() if line.startswith("BENCH ")]
    lenet = json.loads(line.removeprefix("BENCH "))["lenet"]
    assert set(lenet) == {"eager", "project"}
    assert lenet["eager"]["ms"] > 0 and lenet["project"]["ms"] > 0


def test_the_torchrun_baseline_runs_as_the_check_reads_it(tmp_path, monkeypatch):
    """bench/torchrun_ddp.py (the plain script the check compares a Ray trial with)
    on a CPU, with the trial's bf16 autocast and channels-last: its log read as the
    check reads it, and the verdict on the Ray trial against it."""
    log = tmp_path / "torchrun.log"
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "1",
                        str(REPO / "bench" / "torchrun_ddp.py"), "--epochs", "2",
                        "--train-limit", "256", "--batch-size", "64", "--test-limit", "100",
                        "--precision", "bf16", "--memory-format", "channels-last"],
                       stdout=out, stderr=subprocess.STDOUT, timeout=120, cwd=REPO, check=True)
    check = import_bench("gpu_check", monkeypatch)
    figures = check.torchrun_figures(log, "channels-last")
    assert figures["epochs_run"] == 2 and figures["epoch_s"] > 0
    assert 0 <= figures["test_acc"] <= 1
    assert check.torchrun_figures(tmp_path / "none.log", "nchw") == {}
    within = {"d2l_13_6": {"epoch_s": figures["epoch_s"] * 1.02}, "torchrun": figures}
    assert check.verdicts(within)["ray_vs_torchrun"].startswith("met: 0.02")
    beyond = {"d2l_13_6": {"epoch_s": figures["epoch_s"] * 1.10}, "torchrun": figures}
    assert check.verdicts(beyond)["ray_vs_torchrun"].startswith("MISSED: 0.1")
    assert check.verdicts({})["ray_vs_torchrun"] == "not measured"
    # The whole check's time is judged only where every step ran.
    ran = {"ran": True, "exit": 0, "seconds": 1.0}
    assert check.verdicts({"check_s": 250.0}, {"a": ran})["check_s"] == "met: 250 against 300"
    assert check.verdicts({"check_s": 60.0}, {"a": ran, "b": {"ran": False}})[
        "check_s"].startswith("not measured")
    # The check's own command: the book's recipe on the GPU, as the trial runs it.
    argv = check.torchrun_argv(["--data-dir", "D"], "nchw")
    assert argv[argv.index("--device") + 1] == "cuda" and argv[-2:] == ["--data-dir", "D"]
    assert argv[argv.index("--memory-format") + 1] == "nchw"
    assert (argv[argv.index("--batch-size") + 1], argv[argv.index("--lr") + 1]) == ("256", "0.1")


def test_a_step_over_its_limit_is_stopped_with_what_left_its_session(tmp_path, monkeypatch):
    """The check's step over its limit: its session killed, and a child that started
    a session of its own (as torchrun's workers do) killed too; it would otherwise
    hold the GPU into the next step."""
    check = import_bench("gpu_check", monkeypatch)
    pid_file = tmp_path / "child.pid"
    spawn = ("import subprocess, sys, time\n"
             "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
             " start_new_session=True)\n"
             f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
             "time.sleep(300)\n")
    with open(tmp_path / "step.log", "w") as log:
        assert check.run_whole([sys.executable, "-c", spawn], log, limit_s=3) == "timeout"
    child = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL is delivered at once; reaping by init may take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as stat:
            if stat.read().rpartition(")")[2].split()[0] == "Z":
                break  # killed, awaiting its reaper
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError("the step's child in a session of its own outlived the step")
    with open(tmp_path / "step.log", "w") as log:
        assert check.run_whole([sys.executable, "-c", "raise SystemExit(3)"], log, 30) == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="its calls would run the check here")
def test_the_device_calls_name_the_checks_steps_and_run_nothing_without_a_gpu(tmp_path,
                                                                             monkeypatch):
    """bench/gpu_calls.sh, what a lent GPU machine runs: every step it asks of the
    check is one the check has; on a CPU its calls 2 and 3 end in the check's one
    line and send nothing back; a call it does not have is refused."""
    script = REPO / "bench" / "gpu_calls.sh"
    check = import_bench("gpu_check", monkeypatch)
    asked = {step for steps in re.findall(r"gpu_check\.py[^;]*?--steps ([\w,]+)",
                                                script.read_text())
             for step in steps.split(",")}
    assert asked == set(check.STEP_LIMITS_S)  # each step in one call or another
    out = tmp_path / "out"
    out.mkdir()
    # python3 as the machine's: this environment's, torch and Ray importable.
    env = {**os.environ, "OUT": str(out),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def call(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                              timeout=120, cwd=REPO, env=env)
    for args in (["2"], ["3", "600.5"]):  # status' budget, whole or not
        done = call(*args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "gpu_check: no CUDA device on this machine" in done.stdout
    skipped = call("3", "239")
    assert skipped.returncode == 0 and "under 240: call 3 skipped" in skipped.stdout
    assert not any(out.iterdir())
    refused = call("4")
    assert refused.returncode == 2 and "call 1, 2 or 3, not 4" in refused.stderr
    assert call("3").returncode != 0  # without the budget left
