"""The sweep's microbenchmark in one process: only the compute probe, no
allreduce to time (tests/processes/test_calibration_on_processes.py times
the transports on two gloo processes)."""

import os
import subprocess
import sys

import torch

from orchestrator.training import calibration
from orchestrator.training.calibration import (LARGEST_BYTES, gradient_bytes, largest_message,
                                               layouts_of, measure, transports_of)
from orchestrator.config.grid import SweepConfig
from orchestrator.config.options import TrainConfig


def test_one_process_times_compute_only(monkeypatch):
    # What is timed, not how well: batches of 32 rather than 256, and rounds
    # of about 0.03 s rather than the sweep's 0.3 s (at least 3 steps each),
    # the same 10 rounds.
    monkeypatch.setattr(calibration, "COMPUTE_PROBE_S", 0.03)
    measured = measure(TrainConfig(global_batch_size=32), torch.device("cpu"), worker_counts=(1,),
                       transports=("shared memory", "group"), layouts=())
    assert measured["allreduce"] == []
    assert [row["num_workers"] for row in measured["compute"]] == [1]
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
