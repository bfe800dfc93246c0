"""Faults injected for real: a training worker killed mid-epoch, a sweep
driver interrupted or killed and resumed, trials that fail or diverge beside
healthy ones."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers import REPO, hang_limit, popen_script, read_until

SMALL = ["--batch-size", "64", "--train-limit", "4096", "--test-limit", "500"]


def _training_worker_pids() -> list[int]:
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in listing.splitlines() if "ray::RayTrainWorker" in line]


def _sweep_with_a_worker_killed_in_epoch_2(out_dir, log, *args: str) -> tuple[int, str, int]:
    """Run sweep.py with `args`, SIGKILL a training worker once the first
    trial has its first epoch checkpoint (it is then in epoch 2), and wait for
    the sweep to end; returns its exit status, its output and the killed pid.
    The output goes to a file, not a pipe: nothing reads while we wait."""
    with log.open("w") as log_file:
        process = popen_script("sweep.py", *args, "--out", str(out_dir), stdout=log_file)
    try:
        deadline = time.monotonic() + hang_limit(180)
        while not list((out_dir / "ray" / "train-runs").glob("*/*/checkpoint_*")):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        victims = _training_worker_pids()
        assert victims, "no Ray Train worker process found"
        os.kill(victims[-1], signal.SIGKILL)
        process.wait(timeout=hang_limit(600))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, log.read_text(), victims[-1]


@pytest.mark.reliability(
    fault="a training worker SIGKILLed in the middle of an epoch",
    lost="the partial epoch, recomputed from the last epoch checkpoint; each epoch is reported once")
def test_a_killed_worker_restarts_from_the_last_epoch_and_finishes(tmp_path):
    # Epochs of 16,384 images (about 3 s on 2 cores), so that the kill half a
    # second after epoch 1's line lands in epoch 2, not after the last epoch.
    process = popen_script("train.py", "--workers", "2", "--epochs", "3", "--lr", "0.2",
                           "--max-failures", "2", "--storage", str(tmp_path), *SMALL,
                           "--train-limit", "16384")
    seen: list[str] = []
    try:
        read_until(process, r"epoch 1/3:", 240, seen)
        time.sleep(0.5)  # into epoch 2
        victims = _training_worker_pids()
        assert victims, "no Ray Train worker process found"
        os.kill(victims[-1], signal.SIGKILL)
        final = read_until(process, r"^test acc: ", 300, seen)
        assert process.wait(timeout=hang_limit(60)) == 0, "".join(seen[-40:])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = "".join(seen)
    # Our line beside Ray's: which run, which retry, and where it resumes: the
    # last epoch finished before the kill (epochs can be shorter than the sleep).
    retry = re.search(r"Ray Train run \S+: worker .* failed; retry 1 of 2, resuming from the "
                      r"checkpoint of epoch (\d)\n", output)
    assert retry, output[-3000:]
    assert int(retry.group(1)) == len(re.findall(r"epoch \d/3:", output[:retry.start()]))
    # Each epoch is reported exactly once, across the restart.
    assert [int(n) for n in re.findall(r"epoch (\d)/3:", output)] == [1, 2, 3], output[-3000:]
    assert "on 2 workers [cpu, cpu]" in final
    checkpoints = sorted(path for path in tmp_path.glob("*/checkpoint_*") if path.is_dir())
    history = json.loads((checkpoints[-1] / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2, 3]


@pytest.mark.reliability(
    fault="a sweep trial's training worker SIGKILLed in the middle of an epoch (--max-failures 1)",
    lost="the partial epoch: the trial restarts its workers from its last epoch checkpoint, in "
         "the trial's own process (where a sweep runs Ray Train's controller), and finishes")
def test_a_killed_worker_in_a_sweep_trial_restarts_and_the_trial_finishes(tmp_path):
    out_dir = tmp_path / "out"
    returncode, output, victim = _sweep_with_a_worker_killed_in_epoch_2(
        out_dir, tmp_path / "sweep.log",
        "--workers", "2", "--lr", "0.2", "--epochs", "3", "--max-failures", "1", *SMALL)
    assert returncode == 0, output[-3000:]
    assert f"Worker PID: {victim}" in output  # Ray saw the death: the restart was real
    trials = pd.read_csv(out_dir / "trials.csv")
    assert trials["status"].tolist() == ["finished"]
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert epochs["epoch"].tolist() == [1, 2, 3]  # each epoch once, across the restart


@pytest.mark.reliability(
    fault="the sweep driver stopped mid-sweep (Ctrl-C: SIGINT; or SIGKILL of it and its embedded "
          "Ray), then --resume (after SIGKILL: of a copy of the folder)",
    lost="nothing finished; unfinished trials continue from their last epoch checkpoint; a "
         "copy resumes from its own state, the original left as it was")
@pytest.mark.parametrize("stop", ["SIGINT", "SIGKILL"])
def test_a_stopped_sweep_resumes_without_rerunning_finished_trials(tmp_path, stop):
    """After SIGKILL the folder is copied and the copy resumed: its sweep.json names
    the original's storage (out/ray), and Tune's restored trials their Train runs'
    folder there; the copy must resume from its own, and the original stay as it was."""
    out_dir = tmp_path / "out"
    args = ["--workers", "1,2", "--lr", "0.2", "--epochs", "2", *SMALL, "--no-calibrate",
            "--out", str(out_dir)]
    process = popen_script("sweep.py", *args)
    seen: list[str] = []
    try:
        first_done = read_until(process, r"trial (\S+) done: test acc", 300, seen)
        finished_trial = re.search(r"trial (\S+) done", first_done).group(1)
        if stop == "SIGINT":
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=hang_limit(120))
            rest = process.stdout.read()
            assert code == 130, "".join(seen[-30:]) + rest[-3000:]  # interrupted, and says how to resume
            assert "--resume" in rest
        else:
            # Past Tune's save of which trials ended (every 2 s), then the
            # driver and every Ray process it started die at once.
            time.sleep(4)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    original = None
    if stop == "SIGKILL":
        copied = tmp_path / "copied"
        shutil.copytree(out_dir, copied, symlinks=True)
        original = _files(out_dir)
        args[args.index(str(out_dir))] = str(copied)
        out_dir = copied
    resumed = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), *args, "--resume"],
                             capture_output=True, text=True, timeout=hang_limit(600),
                             cwd=REPO)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    if original is not None:
        assert _files(tmp_path / "out") == original  # not a file written, added or removed
    output = resumed.stdout + resumed.stderr
    assert f"trial {finished_trial} done" not in output  # kept, not re-run
    trials = pd.read_csv(out_dir / "trials.csv")
    assert len(trials) == 2 and (trials["status"] == "finished").all()
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert sorted(epochs.groupby("trial_id")["epoch"].apply(list).tolist()) == [[1, 2], [1, 2]]
    assert not list(out_dir.glob(".*partial*"))


@pytest.mark.reliability(
    fault="Ctrl-C (SIGINT to the process group) in the sweep's calibration, before its first "
          "trial",
    lost="the calibration; the folder is left as it was (here: not there), so that the same "
         "command starts the sweep again")
def test_a_sweep_stopped_in_its_calibration_leaves_no_folder_to_refuse(tmp_path):
    """Before, Ray Train's handler ended the driver with exit 1 and not a word, and the
    claimed folder held no Tune state: --resume refused it, and so did a new sweep."""
    out_dir = tmp_path / "out"
    process = popen_script("sweep.py", "--workers", "1,2", "--epochs", "1", *SMALL,
                           "--out", str(out_dir))
    seen: list[str] = []
    try:
        read_until(process, r"^calibrating: allreduce", 300, seen)
        assert (out_dir / "sweep.json").is_file()  # claimed before the calibration
        # Within its worker group's start (seconds): before Ray Train installs its
        # handler the Ctrl-C is a KeyboardInterrupt, after it a SystemExit; both end so.
        time.sleep(2)
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=hang_limit(120))
        rest = process.stdout.read()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert code == 130, "".join(seen[-30:]) + rest[-3000:]
    assert ("The sweep was interrupted before its first trial (in its calibration): nothing "
            "was kept, and the same command starts it again.") in rest, rest[-3000:]
    assert not out_dir.exists()


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: its size and modification time (ns)."""
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


@pytest.mark.reliability(
    fault="in one sweep: a trial whose workers die with no retries left (--max-failures 0), and a "
          "trial whose learning rate diverges (lr 50)",
    lost="the failed trial's unfinished epochs; the other trials run to the end and every result "
         "file is written, the failed trial marked failed with its error, the diverging one diverged")
def test_failed_and_diverged_trials_leave_the_rest_of_the_sweep_whole(tmp_path):
    out_dir = tmp_path / "out"
    # Two workers per trial: one trial at a time on 2 CPUs, so the first
    # workers to appear are the first trial's.
    returncode, output, _ = _sweep_with_a_worker_killed_in_epoch_2(
        out_dir, tmp_path / "sweep.log",
        "--workers", "2", "--lr", "0.3,50,0.5", "--epochs", "3", "--max-failures", "0", *SMALL)
    assert returncode == 1, output[-3000:]  # results written, but the sweep is not whole
    assert re.search(r"1 trial failed: \S+_00000", output), output[-3000:]
    trials = pd.read_csv(out_dir / "trials.csv").set_index("base_lr")
    assert trials.loc[0.3, "status"] == "failed" and trials.loc[0.3, "error"]
    assert trials.loc[0.3, "epochs_run"] == 1
    assert trials.loc[50.0, "status"] == "diverged" and trials.loc[50.0, "epochs_run"] == 1
    assert trials.loc[0.5, "status"] == "finished" and trials.loc[0.5, "epochs_run"] == 3
    assert (out_dir / "report.md").is_file() and (out_dir / "epochs.csv").is_file()
