"""What the loop measures beside the step: the non-finite check that stops a
diverged run, each rank's sync seconds step by step, and the gradient noise
scale's two norms. Each keeps its sums on the device and is read where the loop
waits already (the check every step on a CPU, every few on a GPU; the others once
an epoch, with the loss's collective). Nothing here may import ray.
"""

import math

import torch

from orchestrator import records
from orchestrator.config.options import TrainConfig
from orchestrator.training.sync.base import GradientSync
from orchestrator.training.sync.collectives import get_rank, get_world_size

# How often the non-finite-gradient count is read, per device type (records.py).
FINITE_CHECK_INTERVAL_STEPS = records.FINITE_CHECK_INTERVAL_STEPS


class StepSync:
    """Each rank's sync seconds step by step, on CPUs (on a GPU reading them each step
    would make the host wait for the device): `least_s` sums, step by step, the
    least any rank waited. At each sum the rank that arrives last waits for no one,
    so this is the sums' own time, where an epoch's total on any rank also holds its
    waits for the others (and the least of those totals half of them, the order of
    arrival changing from step to step)."""

    def __init__(self, sync: GradientSync, config: TrainConfig, device: torch.device):
        self.sync = sync
        self.on = device.type == "cpu" and config.num_workers > 1
        # A column per step, and one for what the epoch's end waits (delayed's last sum).
        self.shape = (get_world_size(), config.steps_per_epoch + 1) if self.on else (0, 0)
        self.seconds = torch.zeros(self.shape[1], dtype=torch.float64)
        self.device = device
        self._before = 0.0

    def after_step(self, step: int) -> None:
        if self.on:
            now = self.sync.sync_time_s
            self.seconds[step] = now - self._before
            self._before = now

    def rows(self) -> torch.Tensor:
        """This rank's row of a zero matrix, to be summed over the ranks."""
        rows = torch.zeros(self.shape, dtype=torch.float64, device=self.device)
        if self.on:
            self.seconds[-1] = self.sync.sync_time_s - self._before
            rows[get_rank()] = self.seconds
        return rows

    def least_s(self, summed: torch.Tensor) -> float:
        """From `rows` summed over the ranks: the sum over steps of the least rank's
        seconds; NaN where not recorded."""
        if not self.on:
            return math.nan
        return summed.reshape(self.shape).min(dim=0).values.sum().item()


class NonFiniteCheck:
    """Counts the steps whose synced gradients are not finite, and reads the count
    every step on a CPU but only every FINITE_CHECK_INTERVAL_STEPS["cuda"] on a GPU.

    The gradients are identical on every worker after the sync, so every
    worker reaches the same verdict without an extra collective; `sharded`'s
    workers each hold a part of them, and sum their counts when read.
    """

    def __init__(self, sync: GradientSync, device: torch.device):
        self.sync = sync
        self.interval_steps = FINITE_CHECK_INTERVAL_STEPS.get(device.type, 1)
        self.count = torch.zeros((), dtype=torch.int64, device=device)
        self.num_steps = 0

    def failed(self) -> bool:
        """Counts this step's gradients; True if this step reads a nonzero count.
        `last_norm` keeps their norm (the noise probe's batch gradient)."""
        self.count_step()
        return self.after_step()

    def count_step(self) -> None:
        """This step's gradients counted, on the device (a captured step's part)."""
        self.count += ~torch.isfinite(self._summed_norm())

    def after_step(self) -> bool:
        """True if this step is one that reads the count, and it is nonzero."""
        self.num_steps += 1
        return self.num_steps % self.interval_steps == 0 and self.read()

    def read(self) -> bool:
        """Whether any step so far had a non-finite gradient, on any worker."""
        return bool(self.sync.agreed_count(self.count).item())

    def overflowed(self) -> bool:
        """fp16's verdict on this step alone, read now whatever the device (the loss
        scale skips the step, on every worker alike): whether its summed gradients
        are not finite. Not counted: a skipped step is not a diverged run."""
        return bool(self.sync.agreed_count((~torch.isfinite(self._summed_norm())).long()).item())

    def _summed_norm(self) -> torch.Tensor:
        """The norm of this step's summed gradients (this worker's part of them), kept as
        `last_norm`: the noise probe's batch gradient."""
        self.last_norm = torch.nn.utils.get_total_norm(self.sync.summed_grads())
        return self.last_norm


class GradientNoise:
    """The gradient noise scale's two measurements, free in data-parallel training
    (McCandlish et al., 2018, "An Empirical Model of Large-Batch Training",
    appendix A.1): each worker's gradient over its shard of b examples and the
    summed gradient over the global batch B are two unbiased estimates of the
    true gradient G at two batch sizes, E|g_b|^2 = |G|^2 + tr(S)/b, from which
    the report solves for the noise tr(S) and |G|^2 (report/noise_scale.py).

    Measured where a worker holds its own shard's gradient before the sum and
    the whole sum after it: scratch, bucketed and root on two workers or more
    (ddp sums inside backward, sharded and delayed hold parts or late sums).
    Accumulated on the device; read once an epoch with the loss's collective.
    """

    SYNCS = ("scratch", "bucketed", "root")
    NOT_MEASURED = {"grad_sq_shard": math.nan, "grad_sq_batch": math.nan,
                    "noise_shard_examples": math.nan}

    @classmethod
    def applies(cls, config: TrainConfig) -> bool:
        return config.num_workers > 1 and config.sync in cls.SYNCS

    def __init__(self, device: torch.device):
        # Summed over steps: this worker's |g_b|^2 (on the device: no step waits for
        # it) and 1/b (known here); the batch's |G_B|^2.
        self.shard_sq = torch.zeros((), dtype=torch.float64, device=device)
        self.inverse_shard = 0.0
        self.batch_sq = torch.zeros((), dtype=torch.float64, device=device)
        # The step's shard measurement, added with its batch's (`add_batch`): a step
        # that fp16's loss scale skips adds neither.
        self._shard: tuple[torch.Tensor, float] | None = None
        self.num_steps = 0  # steps measured (a skipped step is not)

    @property
    def shard_sums(self) -> torch.Tensor:
        """This worker's two sums, to be added up over the workers."""
        return torch.stack([self.shard_sq, self.shard_sq.new_tensor(self.inverse_shard)])

    def add_shard(self, grads: list[torch.Tensor], shard_examples: int,
                  global_batch_size: int) -> None:
        """The shard's gradient before the sum: its losses were divided by the global
        batch, so its mean gradient is B/b times it."""
        norm = torch.nn.utils.get_total_norm(grads).double() * (global_batch_size / shard_examples)
        self._shard = (norm.square(), 1 / shard_examples)

    def add_batch(self, norm: torch.Tensor) -> None:
        """The summed gradient's norm: the global batch's mean gradient; with it, the
        step's shard measurement."""
        shard_sq, inverse_shard = self._shard
        self.shard_sq += shard_sq
        self.inverse_shard += inverse_shard
        self._shard = None
        self.batch_sq += norm.double().square()
        self.num_steps += 1

    def epoch_metrics(self, shard_totals: torch.Tensor, num_workers: int) -> dict:
        """The epoch's means: |g_b|^2 over every worker and measured step, |G_B|^2
        over those steps, and the shard's size (the harmonic mean of each worker's)."""
        num_steps = self.num_steps  # the same on every worker: they skip steps alike
        if num_steps == 0:
            return dict(self.NOT_MEASURED)
        shard_sq, inverse = (shard_totals / (num_workers * num_steps)).tolist()
        return {"grad_sq_shard": shard_sq, "grad_sq_batch": self.batch_sq.item() / num_steps,
                "noise_shard_examples": 1 / inverse}
