"""experiments/train.py as a user runs it: real Ray, real data subset.
(tests/unit/test_train_script.py: bad input.)"""

import gzip
import os
import re
import signal

import pytest

from helpers import hang_limit, popen_script, read_until, run_script


@pytest.mark.reliability(
    fault="train.py stopped by Ctrl-C (SIGINT to its process group) in a resumed run's epoch",
    lost="the epoch under way: exit 130 and one line naming the last checkpointed epoch and "
         "the command that resumes from it")
def test_two_workers_learn_and_print_the_books_line(tmp_path):
    # 512 steps: the one-worker run of tests/unit/test_worker_loop.py reaches about 0.70.
    options = ["--storage", str(tmp_path), "--name", "books-line", "--workers", "2",
               "--batch-size", "32", "--lr", "0.2", "--train-limit", "8192", "--test-limit",
               "1000", "--sync", "bucketed"]
    # --profile-steps: both ranks' profiles gathered, their traces in the run's folder.
    run = run_script("train.py", *options, "--epochs", "2", "--profile-steps", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        trace = tmp_path / "books-line" / "profile" / f"rank{rank}.pt.trace.json.gz"
        assert re.search(rf"^profile: rank {rank} \(cpu\): 2 steps profiled, [\d.]+ ms a "
                         rf"step; trace {re.escape(str(trace))}$", run.stdout, re.M), run.stdout
        assert "ProfilerStep" in gzip.open(trace).read().decode()
    assert re.search(r"^profile: rank 0's top ops a step: aten::", run.stdout,
                     re.M)
    assert re.search(r"^profile: unprofiled, the epochs after the first took [\d.]+ ms a "
                     r"step", run.stdout, re.M)
    assert "resuming" not in run.stdout  # a new name: a new run
    assert "Ray dashboard: http://127.0.0.1:" in run.stdout
    assert re.search(r"epoch 2/2: train loss", run.stdout + run.stderr)
    layout, final = run.stdout.strip().splitlines()[-2:]
    match = re.fullmatch(r"test acc: (\d\.\d\d), [\d.]+ sec/epoch on 2 workers \[cpu, cpu\]", final)
    assert match, final
    # --memory-format auto: the workers timed both layouts and took the faster
    timed = re.fullmatch(r"memory format: (nchw|channels-last) \(auto: NCHW ([\d.e-]+) s, "
                         r"channels-last ([\d.e-]+) s a step\)", layout)
    assert timed, layout
    step_s = {"nchw": float(timed.group(2)), "channels-last": float(timed.group(3))}
    assert step_s[timed.group(1)] == min(step_s.values())  # printed to 3 digits: may tie
    assert float(match.group(1)) > 0.4  # chance is 0.1

    # The name of an earlier run with another lr: Ray Train would resume it from
    # its checkpoint, trained at 0.2, so it is refused in one line.
    other = run_script("train.py", *options, "--epochs", "3", "--lr", "0.05")
    assert other.returncode == 2, other.stdout[-2000:] + other.stderr[-2000:]
    assert other.stderr.strip().splitlines()[-1] == (
        "error: --name books-line is an earlier run, which Ray Train would resume from its "
        "checkpoint, but lr 0.05 (the run's: 0.2) differ: give those options as they were, "
        "or another --name")
    assert "Ray dashboard" not in other.stdout  # refused before Ray started
    # A smaller subset: other steps an epoch, which the run's epochs record.
    subset = run_script("train.py", *[value if value != "8192" else "4096" for value in options],
                        "--epochs", "3")
    assert subset.returncode == 2, subset.stdout[-2000:] + subset.stderr[-2000:]
    assert ("but steps an epoch (--train-limit, --batch-size) 128 (the run's: 256) differ"
            in subset.stderr), subset.stderr[-2000:]
    # The same options and more epochs: the run resumes after its second epoch. Then
    # Ctrl-C (SIGINT to the process group, as a terminal sends it) once its third
    # epoch is printed: Ray Train aborts the run, which ends with exit 130 and the
    # line that says what was kept and what resumes it (a later epoch's, if one
    # ended meanwhile), not Ray's exit 1 without a word.
    more, seen = popen_script("train.py", *options, "--epochs", "8"), []
    try:
        read_until(more, r"epoch 3/8: train loss", 300, seen)
        os.killpg(more.pid, signal.SIGINT)
        code = more.wait(timeout=hang_limit(120))
    finally:
        if more.poll() is None:
            os.killpg(more.pid, signal.SIGKILL)
    output = "".join(seen) + more.stdout.read()
    assert code == 130, output[-3000:]
    assert ("resuming run books-line from its checkpoint after epoch 2: 6 of 8 epochs to go"
            in output)
    assert not re.search(r"epoch [12]/8: train loss", output)
    assert re.search(r"^interrupted after epoch [3-7] of 8: the same command resumes the run "
                     r"from that epoch's checkpoint$", output, flags=re.MULTILINE), output[-3000:]


@pytest.mark.reliability(
    fault="train.py: more workers than the cluster can ever hold",
    lost="nothing")
def test_more_workers_than_the_cluster_can_ever_hold():
    run = run_script("train.py", "--workers", "64", "--epochs", "1", timeout_s=120)
    assert run.returncode == 2
    assert re.search(r"needs 64 workers of \{1 CPU\} each, but the embedded local Ray: "
                     r"1 node, \d+ CPUs?, 0 GPUs can hold at most \d+", run.stderr), run.stderr
