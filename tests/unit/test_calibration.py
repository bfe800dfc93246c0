"""The sweep's microbenchmark in one process: only the compute probe, no
allreduce to time (tests/processes/test_calibration_on_processes.py times
the transports on two gloo processes)."""

import torch

from orchestrator.training import calibration
from orchestrator.training.calibration import measure
from orchestrator.config.options import TrainConfig


def test_one_process_times_compute_only(monkeypatch):
    # What is timed, not how well: batches of 32 rather than 256, and rounds
    # of about 0.03 s rather than the sweep's 0.3 s (at least 3 steps each),
    # the same 10 rounds.
    monkeypatch.setattr(calibration, "COMPUTE_PROBE_S", 0.03)
    measured = measure(TrainConfig(global_batch_size=32), torch.device("cpu"), worker_counts=(1,),
                       transports=("shared memory", "group"))
    assert measured["allreduce"] == []
    assert [row["num_workers"] for row in measured["compute"]] == [1]
