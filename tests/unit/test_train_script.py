"""experiments/train.py as a user runs it with bad input: one line, exit
status 2, before any worker (tests/cluster/test_train_script_on_ray.py: the
runs on real Ray)."""

import subprocess
import sys
import time

import pytest

from helpers import REPO, hang_limit, run_main


@pytest.mark.reliability(fault="train.py bad input", lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--model", "alexnet"], "unknown model 'alexnet'"),
    (["--sync", "ring"], "unknown sync 'ring'"),
    (["--workers", "4", "--batch-size", "2"], "smaller than the 4 workers"),
    (["--lr", "0"], "learning rate must be a finite number > 0"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--precision", "fp16"], "unknown precision 'fp16'; choose one of fp32, bf16, fp64"),
    (["--lr", "abc"], "invalid float value: 'abc'"),
    (["--workers", "1,2"], "'1,2': train.py runs one configuration, one value each; sweep.py"),
    (["--data-dir", "/nonexistent"], "/nonexistent: missing train-images-idx3-ubyte.gz"),
    (["--address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["--seed", "99999999999999999999"], "seed must be <= 4294967295"),
    (["--name", "../elsewhere"], "--name '../elsewhere' is not a plain folder name"),
    (["--name", ""], "--name '' is not a plain folder name"),
    (["--dashboard-host", "192.0.2.77"], "not an address this machine can listen on"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_worker(args, fragment):
    started = time.monotonic()
    run = run_main("train.py", *args)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert time.monotonic() - started < hang_limit(30)  # nothing was started, nothing waited on
    assert run.stdout == ""


@pytest.mark.parametrize("script, args", [("train.py", ["--lr", "0"]),
                                          ("sweep.py", ["--workers", "1,two"]),
                                          ("train.py", ["--address", "127.0.0.1:1"]),
                                          ("sweep.py", ["--address", "127.0.0.1:1"])])
def test_bad_input_is_rejected_before_torch_and_ray_are_imported(script, args):
    # Importing them takes 5 s on a 2-core machine; a typo, or an address where
    # no cluster answers, should cost a fraction of one.
    code = (f"import runpy, sys; sys.argv = {[script, *args]!r}\n"
            "try:\n"
            f"    runpy.run_path({str(REPO / 'experiments' / script)!r}, run_name='__main__')\n"
            "except SystemExit as exit:\n"
            "    print(exit.code, [name for name in ('torch', 'ray', 'pandas')\n"
            "                      if name in sys.modules])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert run.stdout.strip() == "2 []", run.stdout + run.stderr
