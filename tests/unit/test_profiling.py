"""`--profile-steps` (training/profiling.py): the window, a profiled run in one
process on real data, and the summaries read back (report/profile.py)."""

import gzip
import io
import json
import re
import shutil
import time
import types
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
    # Beside the profiled step, the same run's unprofiled one: its second epoch's.
    unprofiled = (f"unprofiled, the epochs after the first took "
                  f"{1e3 * 64 / history[1]['samples_per_s']:.3g} ms a step")
    assert any(line.startswith(f"profile: {unprofiled}")
               for line in profile.printed_lines(history))
    rows = pd.DataFrame(profile.rows(pd.DataFrame(history), "t1"),
                        columns=profile.PROFILE_COLUMNS)
    epochs = pd.DataFrame(history).assign(trial_id="t1")
    assert f"- {unprofiled}" in "\n".join(profile.section(rows, epochs))


def test_without_the_option_nothing_is_profiled(fashion_mnist_small):
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=1, train_limit=512,
                         test_limit=200, memory_format="nchw")
    history, _ = train_reporting(config, fashion_mnist_small)
    assert "profile" not in history[0]


def test_outside_a_ray_train_run_the_trace_stays_where_it_is(tmp_path):
    local = tmp_path / "trace.json.gz"
    local.write_bytes(b"trace")
    where = keep_trace_in_run_folder(str(local), 0)
    # The node: its address where this process has joined a Ray (the full suite's
    # cluster tests leave theirs up), else the machine's name.
    assert re.match(rf"{re.escape(str(local))} on \S+ \(not moved to the run's storage: ",
                    where), where
    assert local.read_bytes() == b"trace"


GPU_RANK = {"rank": 0, "device": "cuda:0", "steps": 5, "step_ms": 10.0, "kernels": 212.0,
            "device_busy_ms": 6.1, "nccl_busy_ms": 0.0,
            "trace": "runs/a/profile/rank0.pt.trace.json.gz",
            "ops": [{"op": "sm90_xmma_fprop", "calls": 20.0, "self_cpu_ms": 0.0,
                     "self_device_ms": 2.5},
                    {"op": "void at::native::elementwise_kernel", "calls": 60.0,
                     "self_cpu_ms": 0.0, "self_device_ms": 1.25}]}


def test_a_gpu_profile_reads_as_kernels_and_the_devices_busy_share(tmp_path):
    history = pd.DataFrame([{"epoch": 1, "profile": json.dumps([GPU_RANK, None])},
                            {"epoch": 2, "profile": float("nan")}])
    rows = pd.DataFrame(profile.rows(history, "t1"), columns=profile.PROFILE_COLUMNS)
    assert list(rows["op"]) == ["sm90_xmma_fprop", "void at::native::elementwise_kernel"]
    assert (rows["trial_id"] == "t1").all() and (rows["kernels"] == 212).all()
    lines = profile.printed_lines(history.to_dict("records"))
    assert lines == [
        "profile: rank 0 (cuda:0): 5 steps profiled, 10 ms a step; 212 kernels a step, the "
        "device busy 6.1 ms of it (61%); trace runs/a/profile/rank0.pt.trace.json.gz",
        "profile: rank 0's top kernels a step: sm90_xmma_fprop 2.5 ms, "
        "void at::native::elementwise_kernel 1.25 ms"]
    section = "\n".join(profile.section(rows))
    assert "## Profiled steps" in section and "### t1" in section
    assert "Rank 0's top kernels a step:\n\n| op | calls | self_device_ms |" in section
    # Read back from profile.csv: NaN where a CPU has no kernels, none here.
    again = pd.read_csv(io.StringIO(rows.to_csv(index=False)))
    assert "\n".join(profile.section(again)) == section


def test_a_cpu_profile_has_no_device_column_and_no_profile_no_section():
    cpu_rank = {**GPU_RANK, "device": "cpu", "kernels": None, "device_busy_ms": None}
    history = pd.DataFrame([{"epoch": 1, "profile": json.dumps([cpu_rank])}])
    rows = pd.DataFrame(profile.rows(history, "t1"), columns=profile.PROFILE_COLUMNS)
    section = "\n".join(profile.section(rows))
    assert "Rank 0's top ops a step:\n\n| op | calls | self_cpu_ms |" in section
    assert "self_device_ms" not in section
    assert "- rank 0 (cpu): 5 steps profiled, 10 ms a step; trace" in section
    again = pd.read_csv(io.StringIO(rows.to_csv(index=False)))
    assert "\n".join(profile.section(again)) == section
    empty = pd.DataFrame(columns=profile.PROFILE_COLUMNS)
    assert profile.section(empty) == [] and profile.printed_lines([{"epoch": 1}]) == []


class _SlowProfile:
    """A profiler whose start and stop each take 1000 s of the (patched) clock."""

    def __init__(self, clock, **_):
        self.clock = clock

    def __enter__(self):
        self.clock.offset += 1000.0
        return self

    def __exit__(self, *_):
        self.clock.offset += 1000.0

    def key_averages(self):
        return []

    def events(self):
        return []

    def export_chrome_trace(self, path):
        Path(path).write_text('{"traceEvents": []}')


def test_the_profilers_start_and_stop_are_no_training_time(fashion_mnist_small, monkeypatch):
    real = time.perf_counter

    class Clock:
        offset = 0.0
    monkeypatch.setattr(time, "perf_counter", lambda: real() + Clock.offset)
    monkeypatch.setattr(profiling.profiler, "profile", lambda **kw: _SlowProfile(Clock, **kw))
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=1, train_limit=1024,
                         test_limit=200, profile_steps=3, evals_per_epoch=2,
                         memory_format="nchw")
    history, reports = train_reporting(config, fashion_mnist_small)
    assert Clock.offset == 2000.0  # started and stopped once, before the evaluation
    # Neither the evaluation's training seconds nor the epoch's hold the 2000 s.
    assert 0 < reports[0][0]["train_s"] < 1000 and 0 < history[0]["epoch_time_s"] < 1000
    (rank,) = json.loads(history[0]["profile"])
    assert rank["steps"] == 3 and rank["ops"] == [] and rank["error"] is None
    shutil.rmtree(Path(rank["trace"]).parent)


def test_busy_time_counts_overlapping_kernels_once():
    assert profiling.busy_us([]) == 0
    assert profiling.busy_us([(0, 10), (5, 15), (20, 30), (22, 25)]) == 25
    assert profiling.busy_us([(20, 30), (0, 40)]) == 40


def _event(name, device, start=0.0, end=0.0, annotation=False, count=1, cpu_us=0.0,
           device_us=0.0):
    kind = torch.autograd.DeviceType.CUDA if device else torch.autograd.DeviceType.CPU
    return types.SimpleNamespace(key=name, name=name, device_type=kind,
                                 is_user_annotation=annotation, count=count,
                                 self_cpu_time_total=cpu_us, self_device_time_total=device_us,
                                 time_range=types.SimpleNamespace(start=start, end=end))


def test_on_a_gpu_the_rows_are_kernels_and_spans_are_no_kernels():
    # Two steps: a convolution launched by its host op, which lists the kernel's time
    # as its own device time; a step's span and the optimizer's, mirrored onto the
    # device's timeline as user annotations; an NCCL kernel overlapping a GEMM.
    averages = [
        _event("ProfilerStep#4", False, cpu_us=100.0),
        _event("aten::cudnn_convolution", False, count=2, cpu_us=80.0, device_us=600.0),
        _event("sm90_xmma_fprop", True, count=2, device_us=600.0),
        _event("ncclDevKernel_AllReduce", True, count=2, device_us=400.0),
        _event("Optimizer.step#SGD.step", True, annotation=True, count=2, device_us=5000.0),
    ]
    events = [_event("sm90_xmma_fprop", True, 0, 300), _event("sm90_xmma_fprop", True, 1000, 1300),
              _event("ncclDevKernel_AllReduce", True, 200, 400),
              _event("ncclDevKernel_AllReduce", True, 1200, 1400),
              _event("Optimizer.step#SGD.step", True, 0, 2500, annotation=True),
              _event("aten::cudnn_convolution", False, 0, 50)]
    result = profiling.summary(averages, events, steps=2, seconds=0.004,
                               device=torch.device("cuda", 0))
    assert [op["op"] for op in result["ops"]] == ["sm90_xmma_fprop", "ncclDevKernel_AllReduce"]
    assert result["ops"][0] == {"op": "sm90_xmma_fprop", "calls": 1.0, "self_cpu_ms": 0.0,
                                "self_device_ms": 0.3}
    assert result["kernels"] == 2 and result["step_ms"] == 2.0
    assert result["device_busy_ms"] == pytest.approx(0.4)  # (0-400, 1000-1400) / 2 steps
    assert result["nccl_busy_ms"] == pytest.approx(0.2)
    cpu = profiling.summary(averages, events, steps=2, seconds=0.004,
                            device=torch.device("cpu"))
    assert [op["op"] for op in cpu["ops"]] == ["aten::cudnn_convolution"]
    assert cpu["kernels"] is None and cpu["device_busy_ms"] is None
    assert cpu["error"] is None
    # A GPU whose kernels the profiler did not record: its host ops, and why.
    host = [row for row in averages if row.device_type == torch.autograd.DeviceType.CPU]
    blind = profiling.summary(host, [_event("aten::cudnn_convolution", False, 0, 50)],
                              steps=2, seconds=0.004, device=torch.device("cuda", 0))
    assert [op["op"] for op in blind["ops"]] == ["aten::cudnn_convolution"]
    assert blind["kernels"] is None and blind["device_busy_ms"] is None
    assert blind["error"].startswith("no kernel recorded on the device")
    assert profile.ranked_by(blind) == ("ops", "self_cpu_ms")


@pytest.mark.parametrize("failing, error", [
    ("summary", "not summarised: OSError: No space left on device"),
    ("_export", "no trace written: OSError: No space left on device"),
])
def test_a_summary_or_trace_that_fails_is_reported_and_the_run_goes_on(
        fashion_mnist_small, monkeypatch, failing, error):
    def broken(*_, **__):
        raise OSError("No space left on device")
    monkeypatch.setattr(profiling, failing, broken)
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=1, train_limit=512,
                         test_limit=200, profile_steps=2, memory_format="nchw")
    history, _ = train_reporting(config, fashion_mnist_small)
    (rank,) = json.loads(history[0]["profile"])
    assert rank["error"] == error and rank["steps"] == 2 and rank["step_ms"] > 0
    # A trace that was not written leaves the summary whole; a failed summary, its time
    # and the trace, which may show what the summary could not.
    assert bool(rank["ops"]) == (failing == "_export")
    assert (rank["trace"] is None) == (failing == "_export")
    if rank["trace"] is not None:
        shutil.rmtree(Path(rank["trace"]).parent)
    assert history[0]["status"] == "ok"
    rows = pd.DataFrame(profile.rows(pd.DataFrame(history), "t1"),
                        columns=profile.PROFILE_COLUMNS)
    assert set(rows["error"]) == {error}
    for text in ("\n".join(profile.section(rows)),
                 "\n".join(profile.printed_lines(history))):
        assert f"2 steps profiled, {rank['step_ms']:.3g} ms a step; {error}" in text
        assert ("; trace " in text) == (failing == "summary")  # never "trace None"
        assert "unprofiled" not in text  # one epoch: none to set beside it


def test_the_unprofiled_step_counts_only_later_epochs_that_ran_whole():
    def history(*rows):
        return pd.DataFrame([{"epoch": epoch, "global_batch_size": 64, "samples_per_s": rate,
                              "status": status} for epoch, rate, status in rows])
    line = profile.unprofiled_line(history((1, 320.0, "ok"), (2, 640.0, "ok"),
                                           (3, 1280.0, "ok"), (4, float("nan"), "ok")))
    assert line.startswith("unprofiled, the epochs after the first took 75 ms a step")
    # A run that diverged at its second epoch's first step (no throughput) has none.
    assert profile.unprofiled_line(history((1, 320.0, "ok"), (2, 0.0, "diverged"))) is None
    assert profile.unprofiled_line(history((1, 320.0, "ok"), (2, 500.0, "diverged"))) is None
    assert profile.unprofiled_line(history((1, 320.0, "ok"))) is None


def test_a_kernels_templated_name_is_cut_where_printed_and_kept_literal_in_the_table():
    """A CUDA kernel's name is a C++ template hundreds of characters long: report.md's
    table and train.py's line cut it (profile.csv keeps it whole), and the table's
    cell is a code span, so that GitHub does not read `<4, ...<float>` as HTML tags
    and drop them, nor a `|` as the cell's end."""
    kernel = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1>)")
    rank = {**GPU_RANK, "ops": [
        {"op": kernel, "calls": 3.0, "self_cpu_ms": 0.0, "self_device_ms": 0.5},
        {"op": "a|b", "calls": 1.0, "self_cpu_ms": 0.0, "self_device_ms": 0.25}]}
    history = pd.DataFrame([{"epoch": 1, "profile": json.dumps([rank])}])
    rows = pd.DataFrame(profile.rows(history, "t1"), columns=profile.PROFILE_COLUMNS)
    assert list(rows["op"]) == [kernel, "a|b"]
    cut = kernel[:profile.OP_NAME_CHARS - 3] + "..."
    assert len(cut) == profile.OP_NAME_CHARS and "kernel<4, at::native::FillFunctor<" in cut
    section = "\n".join(profile.section(rows)).splitlines()
    assert f"| `{cut}` | 3 | 0.5 |" in section
    assert "| `a\\|b` | 1 | 0.25 |" in section
    assert profile.printed_lines(history.to_dict("records"))[-1] == (
        f"profile: rank 0's top kernels a step: {cut} 0.5 ms, a|b 0.25 ms")
