"""The typed config of one training run, and the one place it is validated.

A `TrainConfig` is checked when it is built, before anything touches a
cluster, so a typo costs a one-line error rather than a started trial.
"""

import dataclasses
import math
from dataclasses import dataclass

from orchestrator.data import TEST_SIZE, TRAIN_SIZE, shard_bounds
from orchestrator.errors import UserError

MODELS = ("lenet", "resnet18")
SYNC_STRATEGIES = ("scratch", "bucketed", "ddp")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One data-parallel training run, as every worker sees it."""

    model: str = "lenet"
    """Which of the book's networks: `lenet` (13.5) or `resnet18` (13.6)."""

    num_workers: int = 1
    """Ray Train workers, each owning one device (the book's `num_gpus`)."""

    global_batch_size: int = 256
    """Examples per optimizer step, summed over all workers."""

    lr: float = 0.2
    """SGD learning rate applied to the mean gradient of the global batch."""

    num_epochs: int = 10
    """Passes over the training set."""

    sync: str = "scratch"
    """Gradient synchronisation: `scratch`, `bucketed` or `ddp` (see sync.py)."""

    seed: int = 0
    """Seeds the initial weights (on rank 0) and the per-epoch shuffle."""

    train_limit: int | None = None
    """Train on only the first N training images (quick runs); None = all."""

    test_limit: int | None = None
    """Score only the first N test images; None = all."""

    threads_per_worker: int = 1
    """torch intra-op threads per worker; also the CPUs Ray reserves for it."""

    use_gpu: bool = False
    """Each worker owns one GPU (NCCL) instead of a CPU slot (gloo)."""

    sync_batchnorm: bool = False
    """Synchronise BatchNorm statistics across workers (default: per worker)."""

    warmup_epochs: int = 0
    """Linear learning-rate warm-up over this many epochs (Goyal et al., 2017)."""

    bucket_cap_mb: float = 25.0
    """Size cap of one gradient bucket for `bucketed` and `ddp`."""

    def __post_init__(self):
        if self.model not in MODELS:
            raise UserError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.sync not in SYNC_STRATEGIES:
            raise UserError(
                f"unknown sync {self.sync!r}; choose one of {', '.join(SYNC_STRATEGIES)}"
            )
        require_int(self.num_workers, "number of workers", minimum=1)
        require_int(self.global_batch_size, "batch size", minimum=1)
        if self.global_batch_size < self.num_workers:
            raise UserError(
                f"batch size {self.global_batch_size} is smaller than the {self.num_workers} "
                f"workers: every worker needs at least one example per step"
            )
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"learning rate must be a finite number > 0, got {self.lr!r}")
        require_int(self.num_epochs, "epochs", minimum=1)
        require_int(self.seed, "seed", minimum=0)
        require_int(self.threads_per_worker, "threads per worker", minimum=1)
        require_int(self.warmup_epochs, "warm-up epochs", minimum=0)
        if self.warmup_epochs > self.num_epochs:
            raise UserError(
                f"warm-up epochs ({self.warmup_epochs}) exceed the {self.num_epochs} epochs"
            )
        if self.train_limit is not None:
            require_int(self.train_limit, "train limit", minimum=1)
            if self.train_limit > TRAIN_SIZE:
                raise UserError(
                    f"train limit {self.train_limit} is larger than the {TRAIN_SIZE} "
                    f"training images"
                )
            if self.train_limit < self.global_batch_size:
                raise UserError(
                    f"train limit {self.train_limit} is smaller than one global batch "
                    f"({self.global_batch_size}): no step could run"
                )
        if self.test_limit is not None:
            require_int(self.test_limit, "test limit", minimum=1)
            if self.test_limit > TEST_SIZE:
                raise UserError(
                    f"test limit {self.test_limit} is larger than the {TEST_SIZE} test images"
                )
        if not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise UserError(f"bucket cap must be > 0 MB, got {self.bucket_cap_mb!r}")

    @property
    def num_train_examples(self) -> int:
        return TRAIN_SIZE if self.train_limit is None else self.train_limit

    @property
    def num_test_examples(self) -> int:
        return TEST_SIZE if self.test_limit is None else self.test_limit

    @property
    def steps_per_epoch(self) -> int:
        # The last partial global batch is dropped so that every step of
        # every run has exactly `global_batch_size` examples, whatever k is.
        return self.num_train_examples // self.global_batch_size

    @property
    def batch_sizes_per_worker(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in
                     (shard_bounds(self.global_batch_size, self.num_workers, rank)
                      for rank in range(self.num_workers)))

    @property
    def batch_size_per_worker(self) -> int:
        """The largest shard: what the busiest worker computes per step."""
        return -(-self.global_batch_size // self.num_workers)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def require_int(value, what: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise UserError(f"{what} must be >= {minimum}, got {value}")
