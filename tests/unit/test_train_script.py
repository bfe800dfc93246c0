"""experiments/train.py as a user runs it with bad input: one line, exit
status 2, before any worker; and the line an interrupted run ends with
(tests/cluster/test_train_script_on_ray.py: the runs on real Ray, Ctrl-C
included)."""

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
    (["--workers", "2", "--batch-size", "8", "--accumulation-steps", "5"],
     "--accumulation-steps 5 needs at least that many examples in every worker's shard"),
    (["--precision", "fp8"], "unknown precision 'fp8'; choose one of fp32, bf16, fp16, fp64"),
    (["--lr", "abc"], "invalid float value: 'abc'"),
    (["--workers", "1,2"], "'1,2': train.py runs one configuration, one value each; sweep.py"),
    (["--data-dir", "/nonexistent"], "/nonexistent: missing train-images-idx3-ubyte.gz"),
    (["--address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["--wait-for-nodes", "30"], "the embedded local Ray has none: give --address"),
    (["--wait-for-nodes", "30", "--address", "127.0.0.1:1"],
     "--wait-for-nodes asks the autoscaler for GPU or CPU workers, and --use-gpu auto"),
    (["--wait-for-nodes", "nan", "--address", "127.0.0.1:1"],
     "--wait-for-nodes must be a number of seconds > 0, got nan"),
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


def test_an_interrupted_run_says_what_it_kept_and_the_command_that_resumes_it(tmp_path):
    """Read from the newest checkpoint as a resume reads it; a run without --name
    gets its generated name in the command, since the same command names another run."""
    from orchestrator.config.options import TrainConfig
    from orchestrator.driver.jobs import _interrupted_line
    from orchestrator.training.checkpoint import save_checkpoint

    config, run = TrainConfig(num_epochs=5), tmp_path / "lenet-2w-20261130-203246"
    assert _interrupted_line(config, run.name, str(run), named=False) == (
        "interrupted before the first epoch's checkpoint: nothing kept; the same command "
        "with --name lenet-2w-20261130-203246 starts it again")
    for epoch, name in ((1, "checkpoint_2026-11-30_20-34-57.1"),
                        (2, "checkpoint_2026-11-30_20-35-01.2")):
        (run / name).mkdir(parents=True)
        save_checkpoint(run / name, None, [{"epoch": e} for e in range(1, epoch + 1)], [])
    assert _interrupted_line(config, run.name, str(run), named=True) == (
        "interrupted after epoch 2 of 5: the same command resumes the run from that "
        "epoch's checkpoint")
    assert _interrupted_line(config, run.name, str(run), named=False) == (
        "interrupted after epoch 2 of 5: the same command with --name "
        "lenet-2w-20261130-203246 resumes the run from that epoch's checkpoint")
    short = TrainConfig(num_epochs=2)
    assert _interrupted_line(short, run.name, str(run), named=True) == (
        "interrupted after the last epoch (2 of 2): the same command reads its result back "
        "from its checkpoint")


@pytest.mark.parametrize("script", ["train", "sweep"])
def test_a_ctrl_c_outside_a_fit_is_one_line_and_exit_130(monkeypatch, capsys, script):
    """The imports, Ray's start and shutdown: a KeyboardInterrupt (interrupts.py puts
    Python's handler back after each fit) is one line, not a traceback."""
    from orchestrator.driver import commands, jobs

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, script, interrupted)
    assert getattr(commands, f"{script}_main")([]) == commands.EXIT_INTERRUPTED == 130
    assert capsys.readouterr() == ("", "interrupted (Ctrl-C)\n")
