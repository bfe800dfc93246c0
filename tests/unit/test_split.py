"""The proportional split (13.6, exercise 2): shares that follow measured speed,
and the epoch line that shows them. (tests/processes/test_split_on_processes.py
and tests/cluster/test_split_on_ray.py keep the single-device update whatever
the shares, and give a real straggler less.)"""

import pytest

from orchestrator.records import epoch_line
from orchestrator.config.dataset import even_shares
from orchestrator.training.split import proportional_shares


@pytest.mark.parametrize("total, speeds, expected", [
    (256, [2.0, 1.0], (170, 86)),
    (255, [1.0, 1.0, 1.0], (85, 85, 85)),
    (256, [1.0, 1.0], (128, 128)),
    (10, [1000.0, 1.0, 1.0], (8, 1, 1)),  # every worker keeps one example
    (3, [1.0, 5.0, 9.0], (1, 1, 1)),
    (7, [1.0, 1.0, 1.0], (3, 2, 2)),  # a tie goes to the lower rank
])
def test_shares_follow_speed_sum_to_the_batch_and_keep_one_each(total, speeds, expected):
    shares = proportional_shares(total, speeds)
    assert shares == expected
    assert sum(shares) == total and min(shares) >= 1


def test_even_shares_are_the_even_split():
    assert even_shares(255, 2) == (128, 127) and even_shares(7, 3) == (3, 2, 2)


def test_the_epoch_line_shows_each_workers_share_and_compute_seconds():
    metrics = {"epoch": 2, "train_loss": 0.5, "train_acc": 0.8, "test_acc": 0.8,
               "epoch_time_s": 4.0, "samples_per_s": 1000.0, "sync_time_s": 0.5, "status": "ok",
               "worker_shares": [170, 86], "worker_compute_s": [3.0, 3.1]}
    assert epoch_line(metrics, 3).endswith("sync 0.50 s), shares 170/86 computing 3.00/3.10 s")
    one_worker = epoch_line({**metrics, "worker_shares": [256], "worker_compute_s": [3.0]}, 3)
    assert one_worker.endswith("sync 0.50 s)")
