"""The main job on a machine of one GPU, through Ray and Tune (sweep.py with its
embedded Ray, as a reader of the book with one GPU runs it). Needs a CUDA GPU:
skipped without one (tests/conftest.py); the plans on a CPU Ray that declares a
GPU are tested in tests/cluster/test_sweep_script_on_ray.py."""

import json
import os

import pandas as pd
import torch

from helpers import SMALL, run_script


def _one_gpu() -> dict:
    """The environment of a machine of one GPU, on a machine of several: the first
    visible one only (the embedded Ray counts what CUDA_VISIBLE_DEVICES shows)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None and torch.cuda.device_count() <= 1:
        return dict(os.environ)
    first = (visible or "0").split(",")[0].strip()
    return {**os.environ, "CUDA_VISIBLE_DEVICES": first}


def test_two_workers_share_the_gpu_over_gloo_and_give_no_speedup(tmp_path):
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", "--workers", "1,2", "--gpus-per-worker", "0.5", *SMALL,
                     "--out", str(out_dir), timeout_s=600, env=_one_gpu())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "workers on GPUs, 0.5 of one each: workers may share a GPU (gloo" in run.stdout
    epochs = pd.read_csv(out_dir / "epochs.csv")
    two = epochs[epochs["num_workers"] == 2]
    assert set(two["backend"]) == {"gloo"} and set(two["devices"]) == {"[cuda:0, cuda:0]"}
    assert set(epochs[epochs["num_workers"] == 1]["devices"]) == {"[cuda:0]"}
    # Timed against two workers' eager steps, the 1-worker step is not captured either.
    assert "CUDA graphs: none (--cuda-graph auto)" in run.stdout
    assert set(epochs["step_graph"].str.startswith("off: ")) == {True}
    assert set(epochs[epochs["num_workers"] == 1]["step_graph"]) == {
        "off: auto, in a sweep that times 1 and 2 workers against each other, whose several "
        "workers' steps run eagerly (--cuda-graph on captures the 1-worker steps anyway)"}
    # The calibration timed one worker's eager step at 32 and 16 a worker (SMALL's
    # batch of 64 over 2), in each layout `--memory-format auto` may choose: the part
    # no smaller shard saves (report/scaling_model.py).
    probes = json.loads((out_dir / "calibration.json").read_text())["step_fixed"]
    assert sorted(probe["memory_format"] for probe in probes) == ["channels-last", "nchw"]
    for probe in probes:
        assert (probe["model"], probe["batch_per_worker"], probe["half_batch"]) == (
            "lenet", 32, 16)
        assert 0 <= probe["fixed_s"] <= probe["half_s"]
    trials = pd.read_csv(out_dir / "trials.csv")
    shared = trials[trials["num_workers"] == 2]
    assert shared["shared_gpu"].all() and shared["speedup"].isna().all()
    assert (trials["status"] == "finished").all()


def test_the_main_job_on_one_gpu_runs_what_fits_and_estimates_the_rest(tmp_path):
    """The README's command with the book's 13.5 preset (1 and 2 workers): the
    1-GPU trial runs under NCCL, the 2-GPU one is named in report.md with the
    scaling model's what-if; exit 0."""
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", *SMALL, "--out", str(out_dir), timeout_s=600, env=_one_gpu())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 workers need 2 GPUs; this cluster has 1: not run" in run.stdout
    trials = pd.read_csv(out_dir / "trials.csv")
    assert list(trials["num_workers"]) == [1] and (trials["status"] == "finished").all()
    # One worker count runs: its step is replayed as a CUDA graph (graphed.py).
    assert set(pd.read_csv(out_dir / "epochs.csv")["step_graph"]) == {"on"}
    report = (out_dir / "report.md").read_text()
    assert "## Not run on this cluster" in report and "What-if: " in report
    # The floor the driver counted before the run (training/memory.py) is under the
    # peak the worker's GPU measured: a floor, on CUDA's own kernels.
    peak = pd.read_csv(out_dir / "epochs.csv")["peak_memory_mb"].max()
    assert 0 < trials["memory_floor_mb"].iloc[0] <= peak
    assert ", the first worker's peak memory " in report and " (its step's floor " in report
