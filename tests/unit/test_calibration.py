"""The sweep's microbenchmark in one process: only the compute probe, no
allreduce to time (tests/processes/test_calibration_on_processes.py times
the transports on two gloo processes)."""

import os
import subprocess
import sys

import pytest
import torch

from orchestrator.training import calibration, step_probes
from orchestrator.training.calibration import (LARGEST_BYTES, gradient_bytes, largest_message,
                                               layouts_of, measure, probes_of, transports_of)
from orchestrator.config.grid import SweepConfig
from orchestrator.config.options import TrainConfig
from orchestrator.training.models import build_model, resnet18


def test_one_process_times_compute_only(monkeypatch):
    # What is timed, not how well: batches of 32 rather than 256, and rounds
    # of about 0.03 s rather than the sweep's 0.3 s, the same 10 rounds.
    monkeypatch.setattr(step_probes, "COMPUTE_PROBE_S", 0.03)
    measured = measure(TrainConfig(global_batch_size=32), torch.device("cpu"), worker_counts=(1,),
                       transports=("shared memory", "group"), layouts=())
    assert measured["allreduce"] == []
    assert measured["step_fixed"] == []  # probed on a GPU only
    assert [(row["num_workers"], row["model"], row["batch_per_worker"], row["rounds"])
            for row in measured["compute"]] == [(1, "lenet", 32, 10)]
    # The CPU and the kernels torch chose on it, which a figure depends on.
    capability = torch.backends.cpu.get_cpu_capability()
    assert measured["processor"].endswith(f", torch's {capability} kernels"), measured["processor"]
    assert measured["processor"].startswith(f"{os.cpu_count()} cores, ")


def test_the_processor_names_the_kernels_torch_was_capped_at():
    # ATEN_CPU_CAPABILITY is read once, when torch loads: a fresh interpreter.
    code = ("import torch; from orchestrator.training.calibration import processor; "
            "print(processor(torch.device('cpu')))")
    capped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env={**os.environ, "ATEN_CPU_CAPABILITY": "default"})
    assert capped.stdout.strip().endswith(", torch's DEFAULT kernels"), capped.stdout


def test_the_sweep_names_each_model_precision_and_bucket_cap_once():
    sweep = SweepConfig(base=TrainConfig(bucket_cap_mb=4.0), workers=(1, 2),
                        sync=("scratch", "bucketed"), precision=("fp32", "fp64"))
    assert layouts_of(sweep) == (("lenet", "fp32", 4.0), ("lenet", "fp64", 4.0))


def test_the_book_allreduce_is_timed_only_for_a_sweep_that_runs_it():
    assert transports_of(SweepConfig(sync=("bucketed",))) == ("shared memory", "group")
    assert transports_of(SweepConfig(sync=("root", "bucketed"))) == (
        "shared memory", "group", "root")
    assert transports_of(SweepConfig(sync=("root",))) == ("group", "root")


def test_the_transports_are_timed_up_to_the_largest_model_the_sweep_sums():
    lenet, resnet = gradient_bytes("lenet", "fp32", 25.0), gradient_bytes("resnet18", "fp32", 25.0)
    lenet_bytes = sum(lenet["tensor_bytes"])
    assert largest_message(lenet_bytes, [lenet]) == 4 * lenet_bytes  # 1 MB: in cache
    # The exercises probe LeNet and train ResNet-18 too (44.7 MB a step): its size.
    assert sum(resnet["tensor_bytes"]) > 40e6
    assert largest_message(lenet_bytes, [lenet, resnet]) == LARGEST_BYTES
    assert largest_message(lenet_bytes, []) == 4 * lenet_bytes


def test_each_model_is_probed_at_the_batch_its_multi_worker_trials_take(monkeypatch):
    # A narrow ResNet-18 stands in for the sweep's (the probe builds it by name).
    monkeypatch.setattr(step_probes, "COMPUTE_PROBE_S", 0.01)
    monkeypatch.setattr(step_probes, "COMPUTE_BUDGET_S", 0.0)  # the fewest rounds: 2
    monkeypatch.setattr(calibration, "model_of", lambda config: (
        resnet18(width=8) if config.model == "resnet18" else build_model(config.model, seed=0)))
    measured = measure(TrainConfig(global_batch_size=16), torch.device("cpu"), worker_counts=(1,),
                       transports=(), layouts=(), probes=(("lenet", 8), ("resnet18", 4)))
    assert [(row["model"], row["batch_per_worker"], row["rounds"])
            for row in measured["compute"]] == [("lenet", 8, 2), ("resnet18", 4, 2)]
    assert all(row["seconds_per_example"] > 0 and row["steps_per_round"] >= 1
               for row in measured["compute"])


def test_the_probes_are_the_models_that_run_on_several_workers_at_their_usual_batch():
    sweep = SweepConfig(base=TrainConfig(), workers=(1, 2, 4), batch_sizes=(256, 512))
    # LeNet at 2 and 4 workers, global 256 and 512: 128, 64, 256, 128 a worker.
    assert probes_of(sweep) == (("lenet", 128),)
    assert probes_of(SweepConfig(base=TrainConfig(), workers=(1,))) == ()


class _ScriptedClock:
    """`time` for the calibration, read from a clock the scripted steps advance."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("fixed_s, per_example_s, expected", [
    (0.002, 1e-5, 0.002),  # an eager GPU step: its launches and its arithmetic
    (0.0, 1e-5, 0.0),  # a step that scales with its shard alone
    (0.0, 0.0, 0.0),  # all launches: a shard of any size takes as long
    (0.001, -1e-6, 0.001 - 64 * 1e-6),  # a half batch slower than the whole: all fixed
])
def test_a_steps_fixed_part_is_where_its_line_through_two_batches_meets_none(
        monkeypatch, fixed_s, per_example_s, expected):
    clock = _ScriptedClock()
    sizes = []

    def scripted_step(config, device, batch_per_worker, *, name, precision, memory_format):
        sizes.append((batch_per_worker, name, precision, memory_format))

        def step():
            clock.now += fixed_s + per_example_s * batch_per_worker + 1e-4
        return step
    monkeypatch.setattr(step_probes, "time", clock)
    monkeypatch.setattr(step_probes, "_shaped_step", scripted_step)
    figures = step_probes.fixed_step_probe(TrainConfig(), torch.device("cpu"), 128,
                                            name="lenet", precision="bf16",
                                            memory_format="channels-last")
    assert sizes == [(128, "lenet", "bf16", "channels-last"), (64, "lenet", "bf16",
                                                               "channels-last")]
    # 1e-4 s a step more, at any shard: fixed too.
    assert figures["fixed_s"] == pytest.approx(expected + 1e-4)
    assert figures["full_s"] == pytest.approx(fixed_s + 1e-4 + 128 * per_example_s)
    assert figures["half_s"] == pytest.approx(fixed_s + 1e-4 + 64 * per_example_s)
    assert (figures["model"], figures["precision"], figures["memory_format"],
            figures["batch_per_worker"], figures["half_batch"], figures["rounds"]) == (
        "lenet", "bf16", "channels-last", 128, 64, step_probes.FIXED_ROUNDS)


@pytest.mark.parametrize("precision, memory_format", [("fp32", "nchw"), ("bf16", "channels-last")])
def test_the_fixed_part_is_probed_through_the_trials_own_step(monkeypatch, precision,
                                                              memory_format):
    """The probe's real steps (on a CPU here; a GPU sweep probes on its GPU): a fresh
    model's forward and backward as step.forward_backward runs a trial's, in the
    precision and layout asked for. What is timed, not how fast."""
    monkeypatch.setattr(step_probes, "FIXED_ROUNDS", 2)
    monkeypatch.setattr(step_probes, "FIXED_PROBE_S", 0.01)
    seen = []
    real = step_probes.forward_backward

    def spy(model, images, labels, config):
        # LeNet's second conv: the first's one input channel lays out alike either way.
        conv = [module for module in model.modules() if isinstance(module, torch.nn.Conv2d)][1]
        seen.append((config.precision, config.memory_format, len(images),
                     conv.weight.is_contiguous(memory_format=torch.channels_last)
                     and not conv.weight.is_contiguous()))
        return real(model, images, labels, config)
    monkeypatch.setattr(step_probes, "forward_backward", spy)
    figures = step_probes.fixed_step_probe(TrainConfig(), torch.device("cpu"), 8, name="lenet",
                                            precision=precision, memory_format=memory_format)
    assert (figures["precision"], figures["memory_format"], figures["half_batch"]) == (
        precision, memory_format, 4)
    assert figures["full_s"] > 0 and figures["half_s"] > 0
    assert 0 <= figures["fixed_s"] <= figures["half_s"]
    # Every step timed is the trials' own forward and backward, in that precision and
    # layout (the first conv's weight channels-last where asked), at 8 and at 4.
    channels_last = memory_format == "channels-last"
    assert set(seen) == {(precision, memory_format, 8, channels_last),
                         (precision, memory_format, 4, channels_last)}
