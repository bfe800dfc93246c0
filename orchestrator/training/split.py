"""How each global batch is divided among the workers (13.6, exercise 2).

`even`: as evenly as possible (config/dataset.py). `proportional`: every
worker times its own forward and backward pass, the seconds and examples
are all-gathered, and each worker's share of the next global batches follows
its measured speed, so that a slower device is given less rather than being
waited for. Any split gives the single-device update (the loop divides the
loss by the global batch), so the split only decides who waits for whom.
Nothing here assumes equal devices: each share comes from its own worker's
measurement.

A worker's first step at a share it has not had before is left out of the
speed its next share follows (though not out of its compute seconds): new
shapes make cuDNN's autotuner (`cudnn.benchmark`, on for every GPU run) search
for its kernels inside that step, and would make a worker look slower for
having been given a new share. A split re-set at every step, whose every step
may be a first, falls back to those steps.

A re-split moves the shares only where the speeds just measured say the slowest
worker's step would end at least MIN_GAIN sooner. Speeds measured anew each
window differ by their noise: followed to the example, a converged split moved
by an example or two at every re-split (each a new shape: a new cuDNN search on
a GPU), and workers of equal speed drifted apart on noise alone.
"""

import math
from collections.abc import Sequence

import torch

from orchestrator.training.sync.collectives import allreduce_, get_rank, get_world_size
from orchestrator.config.options import TrainConfig
from orchestrator.config.dataset import even_shares
from orchestrator.training.timing import DeviceTimer

MIN_GAIN = 0.02


def proportional_shares(total: int, speeds: Sequence[float], least: int = 1) -> tuple[int, ...]:
    """`total` examples in integer shares proportional to `speeds` (examples/s), each
    >= `least`.

    Every worker keeps `least` examples (one; with gradient accumulation one per
    micro-batch, so that every worker runs as many: each SyncBatchNorm forward is a
    collective); the rest is split by largest remainders, ties going to the lower
    rank, so every worker computes the same split from the same gathered figures.
    """
    spare = total - least * len(speeds)
    assert spare >= 0 and all(speed > 0 for speed in speeds), (total, speeds)
    ideal = [spare * speed / sum(speeds) for speed in speeds]
    shares = [math.floor(value) for value in ideal]
    by_remainder = sorted(range(len(speeds)), key=lambda rank: (shares[rank] - ideal[rank], rank))
    for rank in by_remainder[:spare - sum(shares)]:
        shares[rank] += 1
    return tuple(least + share for share in shares)


class BatchSplit:
    """Which slice of each global batch this worker takes, and each worker's measured speed.

    The loop calls `next_slice` before each step, times the step's forward and
    backward with `timer`, and calls `after_step` after it and `end_epoch`
    at the end of each epoch (both collective calls: every worker makes them
    at the same steps). `shares`: where a resumed run left off.
    """

    def __init__(self, config: TrainConfig, device: torch.device,
                 shares: Sequence[int] | None = None):
        self.proportional = config.split == "proportional"
        self.interval_steps = config.split_interval_steps
        self.total = config.global_batch_size
        self.least = config.accumulation_steps  # examples a share keeps: a micro-batch each
        self.rank, num_workers = get_rank(), get_world_size()
        self.device = device
        self.shares = tuple(shares) if shares else even_shares(self.total, num_workers)
        assert len(self.shares) == num_workers and sum(self.shares) == self.total, self.shares
        # The last of several workers emulates a slower device (--straggler-slowdown).
        slowed = num_workers > 1 and self.rank == num_workers - 1
        self.timer = DeviceTimer(device, slowdown=config.straggler_slowdown if slowed else 1.0)
        self._steps = 0
        # Since the last re-split, and in this epoch: this worker's examples and seconds;
        # since the last re-split, those of first steps at a share (the module's docstring).
        self._window = [0, 0.0]
        self._epoch = [0, 0.0]
        self._firsts = [0, 0.0]
        self._stepped_shares: set[int] = set()
        self._first = False

    def next_slice(self) -> tuple[int, int]:
        """[start, stop) of this worker's slice of the next global batch."""
        share = self.shares[self.rank]
        self._first = self.proportional and share not in self._stepped_shares
        if self._first:
            self._stepped_shares.add(share)
            self._drain()  # the steps before it (on a GPU, one wait: once a new share)
        start = sum(self.shares[:self.rank])
        return start, start + share

    def after_step(self) -> None:
        self._steps += 1
        share = self.shares[self.rank]
        self._epoch[0] += share
        if self._first:
            seconds = self.timer.take()
            self._firsts[0] += share
            self._firsts[1] += seconds
            self._epoch[1] += seconds
        else:
            self._window[0] += share
        if self.proportional and self.interval_steps and self._steps % self.interval_steps == 0:
            self._resplit()

    def end_epoch(self, num_steps: int) -> dict:
        """The epoch's per-worker shares (examples per step, averaged over its
        `num_steps` steps) and per-worker forward+backward seconds; then, by
        default, the next epoch's shares."""
        self._drain()
        examples, seconds = _all_gathered(self._epoch, self.device)
        examples = [int(count) for count in examples]
        self._epoch = [0, 0.0]
        if num_steps:
            shares = [count // num_steps if count % num_steps == 0 else round(count / num_steps, 1)
                      for count in examples]
        else:
            shares = list(self.shares)
        if self.proportional and not self.interval_steps and num_steps:
            self._resplit()
        return {"worker_shares": shares, "worker_compute_s": seconds}

    def _resplit(self) -> None:
        self._drain()
        # A worker that has only first steps since the last re-split is timed by those.
        columns = _all_gathered([*self._window, *self._firsts], self.device)
        self._window, self._firsts = [0, 0.0], [0, 0.0]
        speeds = [examples / seconds if examples else first_examples / first_seconds
                  for examples, seconds, first_examples, first_seconds in zip(*columns)]
        proposed = proportional_shares(self.total, speeds, self.least)
        if _slowest_s(proposed, speeds) < (1 - MIN_GAIN) * _slowest_s(self.shares, speeds):
            self.shares = proposed

    def _drain(self) -> None:
        seconds = self.timer.take()
        self._window[1] += seconds
        self._epoch[1] += seconds


def _slowest_s(shares: Sequence[int], speeds: Sequence[float]) -> float:
    """The seconds of a step's slowest worker, each computing its share at its speed."""
    return max(share / speed for share, speed in zip(shares, speeds))


def _all_gathered(values: list, device: torch.device) -> list[list[float]]:
    """Every worker's `values`, a column each, in rank order: each worker writes
    its own row of a zero matrix and the sum is exact."""
    rows = torch.zeros(get_world_size(), len(values), dtype=torch.float64, device=device)
    rows[get_rank()] = torch.tensor(values, dtype=torch.float64)
    allreduce_(rows)
    return rows.T.tolist()
