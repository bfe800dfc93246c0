"""The proportional split (13.6, exercise 2): shares that follow measured speed,
a share's first step left out of the speed they follow, and the epoch line
that shows them. (tests/processes/test_split_on_processes.py
and tests/cluster/test_split_on_ray.py keep the single-device update whatever
the shares, and give a real straggler less.)"""

import pytest
import torch

from orchestrator.records import epoch_line
from orchestrator.config.dataset import even_shares
from orchestrator.config.options import TrainConfig
from orchestrator.training import split as split_module
from orchestrator.training.split import BatchSplit, proportional_shares


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


def test_with_gradient_accumulation_every_share_keeps_a_micro_batch_each():
    """--accumulation-steps 16: every worker runs 16 micro-batches, a slow one too (each
    SyncBatchNorm forward and backward is a collective every worker must make)."""
    assert proportional_shares(64, [4.0, 1.0]) == (51, 13)
    assert proportional_shares(64, [4.0, 1.0], least=16) == (42, 22)
    assert proportional_shares(64, [1000.0, 1.0], least=32) == (32, 32)


def test_even_shares_are_the_even_split():
    assert even_shares(255, 2) == (128, 127) and even_shares(7, 3) == (3, 2, 2)


def test_the_epoch_line_shows_each_workers_share_and_compute_seconds():
    metrics = {"epoch": 2, "train_loss": 0.5, "train_acc": 0.8, "test_acc": 0.8,
               "epoch_time_s": 4.0, "samples_per_s": 1000.0, "sync_time_s": 0.5, "status": "ok",
               "worker_shares": [170, 86], "worker_compute_s": [3.0, 3.1]}
    assert epoch_line(metrics, 3).endswith("sync 0.50 s), shares 170/86 computing 3.00/3.10 s")
    one_worker = epoch_line({**metrics, "worker_shares": [256], "worker_compute_s": [3.0]}, 3)
    assert one_worker.endswith("sync 0.50 s)")


class _ScriptedTimer:
    """A step's seconds as the test gives them, in place of timing it."""

    def __init__(self):
        self.pending = 0.0

    def take(self) -> float:
        seconds, self.pending = self.pending, 0.0
        return seconds


def _two_worker_split(monkeypatch, interval_steps: int) -> tuple[BatchSplit, _ScriptedTimer]:
    """Rank 0's split of two workers; rank 1 computes 500 examples/s, first steps too."""
    monkeypatch.setattr(split_module, "get_world_size", lambda: 2)
    monkeypatch.setattr(split_module, "get_rank", lambda: 0)
    monkeypatch.setattr(split_module, "_all_gathered", lambda values, device: [
        [value, other] for value, other in zip(values, [100, 0.2, 100, 0.2][:len(values)])])
    config = TrainConfig(model="lenet", num_workers=2, global_batch_size=256, lr=0.1,
                         split="proportional", split_interval_steps=interval_steps)
    split = BatchSplit(config, torch.device("cpu"))
    split.timer = timer = _ScriptedTimer()
    return split, timer


def _step(split: BatchSplit, timer: _ScriptedTimer, seconds_an_example: float,
          first_step_s: float = 0.0) -> None:
    start, stop = split.next_slice()
    timer.pending += (stop - start) * seconds_an_example + first_step_s
    split.after_step()


def test_a_shares_first_step_is_left_out_of_the_speed_that_sets_the_next(monkeypatch):
    # Rank 0 computes 1000 examples/s, 5 s more at each share's first step (a
    # GPU's autotuner searching for the new shapes' kernels).
    split, timer = _two_worker_split(monkeypatch, interval_steps=3)
    shares, stepped = [], set()
    for step in range(9):
        new_share = split.shares[0] not in stepped
        stepped.add(split.shares[0])
        _step(split, timer, 0.001, first_step_s=5.0 if new_share else 0.0)
        shares.append(split.shares)
    # Twice rank 1's speed, first steps or not: 2/3 of the batch from the first re-split on
    # (counted with its first steps, rank 0 would have looked 7 to 20 times slower).
    assert shares[2] == shares[5] == shares[8] == proportional_shares(256, [1000, 500]) == (170, 86)
    assert shares[:2] == [(128, 128)] * 2
    epoch = split.end_epoch(num_steps=9)
    # The compute seconds keep the first steps: they were spent.
    assert epoch["worker_shares"][0] == round((128 * 3 + 170 * 6) / 9, 1)
    assert epoch["worker_compute_s"][0] == pytest.approx(2 * 5.0 + (128 * 3 + 170 * 6) * 0.001)


def test_the_default_re_split_at_the_epoch_leaves_first_steps_out_too(monkeypatch):
    split, timer = _two_worker_split(monkeypatch, interval_steps=0)
    _step(split, timer, 0.001, first_step_s=5.0)
    for _ in range(2):
        _step(split, timer, 0.001)
    epoch = split.end_epoch(num_steps=3)
    assert split.shares == (170, 86)
    # Rank 0's epoch: its 3 steps of 128, the first step's 5 s among its compute seconds.
    assert epoch["worker_shares"][0] == 128
    assert epoch["worker_compute_s"][0] == pytest.approx(5.0 + 3 * 0.128)


def test_the_gather_gives_every_worker_a_column_of_each_value():
    # A group of one (no process group): its own row, a column per value.
    assert split_module._all_gathered([3, 0.5, 2, 0.25], torch.device("cpu")) == [
        [3.0], [0.5], [2.0], [0.25]]


def test_a_split_re_set_at_every_step_falls_back_to_first_steps(monkeypatch):
    # Where every step since the last re-split is a first, they are all there is: the
    # shares are what counting them gives (the fallback: no division by zero).
    split, timer = _two_worker_split(monkeypatch, interval_steps=1)
    _step(split, timer, 0.001, first_step_s=0.128)  # 128 examples in 0.256 s: 500 a second
    assert split.shares == (128, 128)
    _step(split, timer, 0.001)  # no longer a first step: 1000 a second
    assert split.shares == (170, 86)


def test_a_re_split_moves_the_shares_only_for_a_gain_beyond_the_speeds_noise(monkeypatch):
    # Rank 1 computes 500 examples/s throughout; rank 0 1000, then 1% faster: followed
    # to the example, the shares would move by one (a new shape, a new cuDNN search on
    # a GPU) for a step 0.5% shorter.
    split, timer = _two_worker_split(monkeypatch, interval_steps=2)
    for seconds_an_example in (0.001, 0.001, 0.00099, 0.00099, 0.00098, 0.00098):
        _step(split, timer, seconds_an_example)
    assert proportional_shares(256, [1 / 0.00098, 500]) == (171, 85)
    assert split.shares == (170, 86)
    # Equal speeds, 1% apart: the even split stays.
    split, timer = _two_worker_split(monkeypatch, interval_steps=2)
    for seconds_an_example in (0.00198, 0.00198):
        _step(split, timer, seconds_an_example)
    assert proportional_shares(256, [1 / 0.00198, 500]) == (129, 127)
    assert split.shares == (128, 128)
    # Beyond MIN_GAIN it moves: rank 0 at 1.1x rank 1's speed.
    for seconds_an_example in (0.002 / 1.1, 0.002 / 1.1):
        _step(split, timer, seconds_an_example)
    assert split.shares == proportional_shares(256, [1.1 * 500, 500]) == (134, 122)
