"""`--profile-steps` (training/profiling.py): the window, a profiled run in one
process on real data, and the summaries read back (report/profile.py)."""

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from orchestrator.config.options import TrainConfig
from orchestrator.report import profile
from orchestrator.training import profiling
from orchestrator.training.loop import run_training
from orchestrator.training.worker import keep_trace_in_run_folder
from helpers import train_reporting


@pytest.mark.parametrize("steps, evaluate_after, skip, requested, expected", [
    (16, set(), 1, 3, range(13, 16)),  # the epoch's last steps
    (16, {8}, 1, 3, range(5, 8)),  # before the first mid-epoch evaluation
    (16, {4, 8, 12}, 1, 10, range(1, 4)),  # fewer: the first step is left out
    (16, set(), 4, 20, range(4, 16)),  # a graphed step's warm-up and capture left out
    (4, {1, 2, 3}, 1, 2, range(1, 1)),  # no step beyond the skipped one: none
])
def test_the_window_leaves_out_warm_up_steps_and_ends_before_an_evaluation(
        steps, evaluate_after, skip, requested, expected):
    assert profiling.window(steps, evaluate_after, skip, requested) == expected


def test_a_profiled_run_summarises_its_first_epochs_steps_and_keeps_a_trace(
        fashion_mnist_small, tmp_path):
    kept = []

    def keep(local, rank):
        kept.append((local, rank))
        return f"kept:{rank}"
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=2, train_limit=1024,
                         test_limit=200, profile_steps=3, evals_per_epoch=2,
                         memory_format="nchw")
    history = run_training(config, fashion_mnist_small, device=torch.device("cpu"),
                           report=lambda *_: None, keep_trace=keep)
    assert "profile" not in history[1]  # the first epoch's only
    (rank,) = json.loads(history[0]["profile"])
    # 16 steps, an evaluation after the 8th: the three before it.
    assert rank["rank"] == 0 and rank["steps"] == 3 and rank["device"] == "cpu"
    assert rank["trace"] == "kept:0" and kept[0][1] == 0
    ops = {op["op"]: op for op in rank["ops"]}
    assert len(ops) == profiling.TOP_OPS and not any(name.startswith("ProfilerStep")
                                                     for name in ops)
    # LeNet's two convolutions, forward and backward, in every step.
    assert ops["aten::convolution_backward"]["calls"] == 2
    cpu_ms = [op["self_cpu_ms"] for op in rank["ops"]]
    assert cpu_ms == sorted(cpu_ms, reverse=True) and cpu_ms[-1] > 0
    # Self times do not overlap: together at most the step's wall time.
    assert sum(cpu_ms) <= rank["step_ms"]
    assert rank["kernels"] is None and rank["device_busy_ms"] is None
    trace = json.load(gzip.open(kept[0][0]))
    steps = {event["name"] for event in trace["traceEvents"]
             if event.get("name", "").startswith("ProfilerStep")}
    assert len(steps) == 3, steps
    shutil.rmtree(Path(kept[0][0]).parent)


def test_without_the_option_nothing_is_profiled(fashion_mnist_small):
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=1, train_limit=512,
                         test_limit=200, memory_format="nchw")
    history, _ = train_reporting(config, fashion_mnist_small)
    assert "profile" not in history[0]


def test_outside_a_ray_train_run_the_trace_stays_where_it_is(tmp_path):
    local = tmp_path / "trace.json.gz"
    local.write_bytes(b"trace")
    where = keep_trace_in_run_folder(str(local), 0)
    assert where.startswith(f"{local} on this node (not moved to the run's storage: ")
    assert local.read_bytes() == b"trace"


GPU_RANK = {"rank": 0, "device": "cuda:0", "steps": 5, "step_ms": 10.0, "kernels": 212.0,
            "device_busy_ms": 6.1, "trace": "runs/a/profile/rank0.pt.trace.json.gz",
            "ops": [{"op": "sm90_xmma_fprop", "calls": 20.0, "self_cpu_ms": 0.0,
                     "self_device_ms": 2.5},
                    {"op": "aten::cudnn_convolution", "calls": 20.0, "self_cpu_ms": 0.4,
                     "self_device_ms": 2.5}]}


def test_a_gpu_profile_reads_as_kernels_and_the_devices_busy_share(tmp_path):
    history = pd.DataFrame([{"epoch": 1, "profile": json.dumps([GPU_RANK, None])},
                            {"epoch": 2, "profile": float("nan")}])
    rows = pd.DataFrame(profile.rows(history, "t1"), columns=profile.PROFILE_COLUMNS)
    assert list(rows["op"]) == ["sm90_xmma_fprop", "aten::cudnn_convolution"]
    assert (rows["trial_id"] == "t1").all() and (rows["kernels"] == 212).all()
    lines = profile.printed_lines(history.to_dict("records"))
    assert lines == [
        "profile: rank 0 (cuda:0): 5 steps profiled, 10 ms a step; 212 kernels a step, the "
        "device busy 6.1 ms of it (61%); trace runs/a/profile/rank0.pt.trace.json.gz",
        "profile: rank 0's top ops by self device time a step: sm90_xmma_fprop 2.5 ms, "
        "aten::cudnn_convolution 2.5 ms"]
    section = "\n".join(profile.section(rows))
    assert "## Profiled steps" in section and "### t1" in section
    assert "| op | calls | self_cpu_ms | self_device_ms |" in section


def test_a_cpu_profile_has_no_device_column_and_no_profile_no_section():
    cpu_rank = {**GPU_RANK, "device": "cpu", "kernels": None, "device_busy_ms": None}
    history = pd.DataFrame([{"epoch": 1, "profile": json.dumps([cpu_rank])}])
    rows = pd.DataFrame(profile.rows(history, "t1"), columns=profile.PROFILE_COLUMNS)
    section = "\n".join(profile.section(rows))
    assert "| op | calls | self_cpu_ms |" in section and "self_device_ms" not in section
    assert "- rank 0 (cpu): 5 steps profiled, 10 ms a step; trace" in section
    empty = pd.DataFrame(columns=profile.PROFILE_COLUMNS)
    assert profile.section(empty) == [] and profile.printed_lines([{"epoch": 1}]) == []
