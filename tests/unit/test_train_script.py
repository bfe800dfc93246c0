"""experiments/train.py as a user runs it: real Ray, real data subset."""

import re
import subprocess
import sys
import time

import pytest

from helpers import REPO, run_script


@pytest.mark.cluster
def test_two_workers_learn_and_print_the_books_line(tmp_path):
    run = run_script("train.py", "--storage", str(tmp_path), "--workers", "2", "--batch-size", "32", "--lr", "0.2",
                     "--epochs", "3", "--train-limit", "8192", "--test-limit", "1000",
                     "--sync", "bucketed")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Ray dashboard: http://127.0.0.1:" in run.stdout
    assert re.search(r"epoch 3/3: train loss", run.stdout + run.stderr)
    final = run.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"test acc: (\d\.\d\d), [\d.]+ sec/epoch on 2 workers \[cpu, cpu\]", final)
    assert match, final
    assert float(match.group(1)) > 0.4  # chance is 0.1


@pytest.mark.reliability(fault="train.py bad input", lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--model", "alexnet"], "unknown model 'alexnet'"),
    (["--sync", "ring"], "unknown sync 'ring'"),
    (["--workers", "4", "--batch-size", "2"], "smaller than the 4 workers"),
    (["--lr", "0"], "learning rate must be a finite number > 0"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--precision", "fp16"], "unknown precision 'fp16'; choose one of fp32, bf16, fp64"),
    (["--lr", "abc"], "invalid float value: 'abc'"),
    (["--data-dir", "/nonexistent"], "/nonexistent: missing train-images-idx3-ubyte.gz"),
    (["--address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_worker(args, fragment):
    started = time.monotonic()
    run = run_script("train.py", *args, timeout_s=60)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert time.monotonic() - started < 30  # nothing was started, nothing waited on
    assert run.stdout == ""


@pytest.mark.parametrize("script, args", [("train.py", ["--lr", "0"]),
                                          ("sweep.py", ["--workers", "1,two"])])
def test_bad_input_is_rejected_before_torch_and_ray_train_are_imported(script, args):
    # Importing them takes 5 s on a 2-core machine; a typo should cost one.
    code = (f"import runpy, sys; sys.argv = {[script, *args]!r}\n"
            "try:\n"
            f"    runpy.run_path({str(REPO / 'experiments' / script)!r}, run_name='__main__')\n"
            "except SystemExit as exit:\n"
            "    print(exit.code, [name for name in ('torch', 'ray.train', 'ray.tune', 'pandas')\n"
            "                      if name in sys.modules])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert run.stdout.strip() == "2 []", run.stdout + run.stderr


@pytest.mark.cluster
@pytest.mark.reliability(
    fault="train.py: more workers than the cluster can ever hold",
    lost="nothing")
def test_more_workers_than_the_cluster_can_ever_hold():
    run = run_script("train.py", "--workers", "64", "--epochs", "1", timeout_s=120)
    assert run.returncode == 2
    assert re.search(r"needs 64 workers of \{1 CPU\} each, but the embedded local Ray: "
                     r"1 node\(s\), \d+ CPUs, 0 GPUs can hold at most \d+", run.stderr), run.stderr
