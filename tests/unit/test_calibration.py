"""The sweep's microbenchmark in one process: only the compute probe, no
allreduce to time (tests/processes/test_calibration_on_processes.py times
the transports on two gloo processes)."""

import torch

from orchestrator.training.calibration import measure
from orchestrator.config.options import TrainConfig


def test_one_process_times_compute_only():
    measured = measure(TrainConfig(), torch.device("cpu"), worker_counts=(1,),
                       transports=("shared memory", "group"))
    assert measured["allreduce"] == []
    assert [row["num_workers"] for row in measured["compute"]] == [1]
