"""experiments/sweep.py as a user runs it with bad input: one line, exit
status 2, before any Ray starts. (tests/cluster/test_sweep_script_on_ray.py:
the sweeps that run, on an embedded Ray and on attached clusters.)"""

import pytest
import torch

from helpers import SMALL, refusal, run_main, run_script


@pytest.mark.reliability(fault="sweep.py bad input", lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--lr", "0.1,,x"], "--lr: '' is not a number"),
    (["--workers", "1,two"], "--workers: 'two' is not an integer"),
    (["--lr", "0.1,inf"], "--lr: 'inf' is not a finite number"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model", "vgg"], "unknown model 'vgg'"),
    (["--sync", "ring"], "unknown sync 'ring'"),
    (["--scheduler", "pbt"], "invalid choice: 'pbt'"),
    (["--workers", "0,1"], "number of workers must be >= 1"),
    (["--workers", "4", "--batch-size", "2"], "smaller than the 4 workers"),
    (["--lr", "-0.1"], "learning rate must be a finite number > 0"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--train-limit", "70000"], "larger than the 60000 training images"),
    (["--train-limit", "100"], "smaller than one global batch (256)"),
    (["--momentum", "0,1"], "momentum must be in [0, 1), got 1.0"),
    (["--target-acc", "1.5"], "target accuracy must be in (0, 1], got 1.5"),
    (["--target-acc", "0"], "target accuracy must be in (0, 1], got 0.0"),
    (["--evals-per-epoch", "0"], "evaluations per epoch must be >= 1"),
    (["--evals-per-epoch", "300"], "300 evaluations per epoch exceed the 234 steps of an epoch"),
    (["--stop-at-target"], "--stop-at-target needs --target-acc"),
    (["--seed", "0,1", "--repeats", "2"], "give --seed or --repeats, not both"),
    (["--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["--seed", "1,1"], "the list of seeds repeats a value"),
    (["--preset", "exercises", "--straggler-slowdown", "0.5"],
     "straggler slowdown must be a number >= 1, got 0.5"),
    (["--preset", "exercises", "--quick", "--baseline-threads", "-1"],
     "baseline threads must be >= 0, got -1"),
    (["--preset", "exercises", "--momentum", "0,0.9"],
     "the exercises study uses one value of its momentums, got [0.0, 0.9]"),
    (["--seed", "0,4294967296"], "seed must be <= 4294967295 (32 bits, as numpy's)"),
    (["--wait-for-nodes", "60"], "--wait-for-nodes asks an attached cluster's autoscaler for "
                                 "nodes, and the embedded local Ray has none"),
    (["--wait-for-nodes", "0", "--address", "127.0.0.1:1"],
     "--wait-for-nodes must be a number of seconds > 0, got 0"),
    (["--preset", "scaling", "--wait-for-nodes", "60", "--address", "127.0.0.1:1"],
     "the scaling preset takes its worker counts from the nodes that are up: give --workers"),
    (["--wait-for-nodes", "60", "--address", "127.0.0.1:1"],
     "--use-gpu auto decides from the nodes that are up: give --use-gpu yes (or no)"),
    # TEST-NET-1 (RFC 5737): no interface of this machine has it.
    (["--dashboard-host", "192.0.2.77"],
     "--dashboard-host 192.0.2.77: not an address this machine can listen on"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    out_dir = tmp_path / "out"
    assert fragment in refusal(run_main("sweep.py", *args, "--out", str(out_dir)), out_dir)


@pytest.mark.reliability(
    fault="sweep.py: --out holding someone else's files; --resume with nothing to resume",
    lost="nothing")
def test_out_folders_are_never_mixed(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("someone else's")
    run = run_script("sweep.py", "--out", str(foreign), timeout_s=60)
    assert run.returncode == 2 and "not empty and holds no sweep of ours" in run.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]

    run = run_script("sweep.py", "--out", str(tmp_path / "nothing"), "--resume", timeout_s=60)
    assert run.returncode == 2 and "nothing to resume in" in run.stderr
    # No folder to resume, or an empty name for one: not the default folder in its stead.
    run = run_main("sweep.py", "--resume")
    assert run.returncode == 2 and run.stderr.strip() == (
        "error: --resume continues the sweep in the folder --out names: give --out")
    run = run_main("sweep.py", "--out", "", "--dry-run")
    assert run.returncode == 2 and "--out is empty" in run.stderr


@pytest.mark.reliability(fault="sweep.py: a config file with unknown keys or wrong types")
@pytest.mark.parametrize("contents, fragment", [
    ('{"workers": [1, 2], "learning_rate": [0.1]}', "unknown option(s) learning_rate"),
    ('{"workers": "1,2"}', "workers must be a list, got '1,2'"),
    ('{"lrs": [0.1, "fast"]}', "lrs must be float, got 'fast'"),
    ('{"num_epochs": 2.5}', "num_epochs must be int, got 2.5"),
    ('{"memory_format": "nhwc"}', "unknown memory format 'nhwc'"),
    ('{"workers": [1, 2]', "unreadable or not JSON"),
    ('{"lrs": [0.1, -1.0]}', "learning rate must be a finite number > 0"),
])
def test_bad_config_file_is_one_line_and_exit_2(tmp_path, contents, fragment):
    config = tmp_path / "sweep-options.json"
    config.write_text(contents)
    run = run_script("sweep.py", "--config", str(config), "--out", str(tmp_path / "out"),
                     timeout_s=60)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr and str(config) in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability(fault="sweep.py: a config file whose use_gpu the command cannot run",
                         lost="nothing")
@pytest.mark.parametrize("contents, cluster, fragment", [
    ('{"workers": [1]}', ["--wait-for-nodes", "60", "--address", "127.0.0.1:1"],
     'leaves use_gpu to the nodes that are up ("auto", or not given): set "use_gpu": true (or '
     'false) in it'),
    pytest.param('{"workers": [1], "use_gpu": true}', [],
                 'sets use_gpu true, but this machine has no GPU that torch can use and the run '
                 'would start a Ray of its own here; give --address of a cluster with GPUs, or '
                 'set "use_gpu": "auto" in it',
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here")),
], ids=["auto-waiting-for-nodes", "true-without-a-gpu"])
def test_a_config_files_use_gpu_is_named_as_the_files_key(tmp_path, contents, cluster, fragment):
    # Its refusals name the file's key: the command refuses --use-gpu beside --config.
    config = tmp_path / "sweep-options.json"
    config.write_text(contents)
    out_dir = tmp_path / "out"
    run = run_main("sweep.py", "--config", str(config), *cluster, "--out", str(out_dir))
    line = refusal(run, out_dir)
    assert f"{config} " in line and fragment in line


@pytest.mark.reliability(fault="sweep.py --resume of a GPU sweep on a machine without a GPU",
                         lost="nothing")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here")
def test_a_resumed_gpu_sweep_without_a_gpu_here_names_the_sweep(tmp_path):
    # Its GPU use was settled when it started (a file's "auto" too): no flag or key to change.
    from orchestrator.config.grid import SweepConfig
    from orchestrator.driver.rundir import claim_out_dir
    out_dir = tmp_path / "gpu-sweep"
    claim_out_dir(out_dir, SweepConfig.from_dict({"workers": [1], "use_gpu": True}),
                  str(out_dir / "ray"), "gpu-1234")
    (out_dir / "ray" / "gpu-1234").mkdir(parents=True)
    (out_dir / "ray" / "gpu-1234" / "tuner.pkl").write_bytes(b"")  # Tune began it
    before = sorted(out_dir.rglob("*"))
    run = run_main("sweep.py", "--resume", "--out", str(out_dir))
    assert run.returncode == 2 and run.stderr.strip() == (
        f"error: the sweep in {out_dir} runs GPU workers, but this machine has no GPU that "
        f"torch can use and the run would start a Ray of its own here; give --address of a "
        f"cluster with GPUs")
    assert sorted(out_dir.rglob("*")) == before


def test_a_config_file_is_the_whole_sweep(tmp_path):
    config = tmp_path / "sweep-options.json"
    config.write_text('{"workers": [1]}')
    run = run_script("sweep.py", "--config", str(config), "--lr", "0.1", timeout_s=60)
    assert run.returncode == 2
    assert "--config holds the whole sweep; put --lr in the file" in run.stderr
    run = run_script("sweep.py", "--config", str(config), "--preset", "scaling", timeout_s=60)
    assert run.returncode == 2
    assert "give --config or --preset, not both" in run.stderr


@pytest.mark.reliability(fault="sweep.py: an --out that cannot be created or written "
                               "(`--out /proc/x`; a path under a file)", lost="nothing")
def test_an_unwritable_out_is_one_line_before_ray_starts(tmp_path):
    (tmp_path / "a-file").write_text("mine")
    for out in ("/proc/x", str(tmp_path / "a-file" / "out")):
        run = run_script("sweep.py", *SMALL, "--out", out, timeout_s=60)
        assert run.returncode == 2, run.stderr[-3000:]
        assert f"--out {out} cannot be created or written" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "Ray" not in run.stdout  # decided before any Ray started
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.reliability(fault="--use-gpu yes on a machine without a GPU, no --address",
                         lost="nothing")
@pytest.mark.parametrize("script", ["sweep.py", "train.py"])
def test_use_gpu_yes_without_a_gpu_is_refused_before_ray_starts(tmp_path, script):
    out = ["--out", str(tmp_path / "out")] if script == "sweep.py" else []
    run = run_script(script, "--use-gpu", "yes", *SMALL, *out, timeout_s=60)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "--use-gpu yes, but this machine has no GPU" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Ray" not in run.stdout
    assert not (tmp_path / "out").exists()
