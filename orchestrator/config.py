"""The typed config of one training run, and the one place it is validated.

A `TrainConfig` is checked when it is built, before anything touches a
cluster, so a typo costs a one-line error rather than a started trial.
"""

import dataclasses
import math
import types
import typing
from dataclasses import dataclass

from orchestrator.data import TEST_SIZE, TRAIN_SIZE, shard_bounds
from orchestrator.errors import UserError

MODELS = ("lenet", "resnet18")
SYNC_STRATEGIES = ("scratch", "bucketed", "ddp")
PRECISIONS = ("fp32", "bf16", "fp64")


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

    shared_memory: bool = True
    """CPU workers on one node sum gradients (`scratch`, `bucketed`) through the
    node's shared memory rather than gloo's sockets, where they can (x86-64);
    False keeps gloo."""

    precision: str = "fp32"
    """`fp32`; `bf16`: the forward pass under bfloat16 autocast, while the loss,
    weights, gradients, their sync and the optimizer stay fp32; `fp64`: all of
    it in double precision, slow but free of float32 rounding (what the
    1-vs-k equivalence test compares)."""

    channels_last: bool = False
    """Model and inputs in channels-last memory format: the same network laid
    out the way GPU tensor cores convolve fastest."""

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
        if self.precision not in PRECISIONS:
            raise UserError(
                f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}"
            )
        for name in ("channels_last", "shared_memory"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.sync_batchnorm and not self.use_gpu:
            raise UserError("synchronised BatchNorm needs GPU workers: torch's SyncBatchNorm "
                            "does not run on CPUs")

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


BATCH_SCALINGS = ("global", "per-worker")
LR_SCALINGS = ("none", "linear")
SCHEDULERS = ("fifo", "asha")


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """A grid over workers x batch size x learning rate, the book's exercises."""

    model: str = "lenet"
    sync: str = "scratch"
    workers: tuple[int, ...] = (1, 2)
    """Worker counts to try (the book's `num_gpus`)."""
    batch_sizes: tuple[int, ...] = (256,)
    """Batch sizes b; what b means is set by `batch_scaling`."""
    lrs: tuple[float, ...] = (0.2,)
    """Base learning rates; the effective one is set by `lr_scaling`."""
    batch_scaling: str = "global"
    """`global`: the global batch is b whatever k (13.5's experiment).
    `per-worker`: each worker gets b, the global batch is k*b (13.5, exercise 1)."""
    lr_scaling: str = "none"
    """`linear`: lr = base_lr * global_batch / b (Goyal et al., 2017); `none`: lr = base_lr."""
    warmup_epochs: int = 0
    num_epochs: int = 10
    seed: int = 0
    train_limit: int | None = None
    test_limit: int | None = None
    threads_per_worker: int = 1
    use_gpu: bool = False
    sync_batchnorm: bool = False
    bucket_cap_mb: float = 25.0
    shared_memory: bool = True
    precision: str = "fp32"
    channels_last: bool = False
    scheduler: str = "fifo"
    """`asha` stops trials early whose test accuracy lags (by epoch)."""
    max_failures: int = 2
    """Worker-group restarts per trial before it is marked failed."""

    def __post_init__(self):
        for name, values in (("workers", self.workers), ("batch sizes", self.batch_sizes),
                             ("learning rates", self.lrs)):
            if not values:
                raise UserError(f"the list of {name} is empty")
            if len(set(values)) != len(values):
                raise UserError(f"the list of {name} repeats a value: {list(values)}")
        if self.batch_scaling not in BATCH_SCALINGS:
            raise UserError(f"unknown batch scaling {self.batch_scaling!r}; choose one of "
                            f"{', '.join(BATCH_SCALINGS)}")
        if self.lr_scaling not in LR_SCALINGS:
            raise UserError(f"unknown lr scaling {self.lr_scaling!r}; choose one of "
                            f"{', '.join(LR_SCALINGS)}")
        if self.scheduler not in SCHEDULERS:
            raise UserError(f"unknown scheduler {self.scheduler!r}; choose one of "
                            f"{', '.join(SCHEDULERS)}")
        require_int(self.max_failures, "max failures", minimum=0)
        self.grid()  # every grid point is a valid TrainConfig, or this raises

    def grid(self) -> list["GridPoint"]:
        """One point per (workers, batch size, lr), with its derived values."""
        points = []
        for num_workers in self.workers:
            for batch_size in self.batch_sizes:
                for base_lr in self.lrs:
                    global_batch_size = (batch_size if self.batch_scaling == "global"
                                         else num_workers * batch_size)
                    lr = (base_lr * global_batch_size / batch_size if self.lr_scaling == "linear"
                          else base_lr)
                    points.append(GridPoint(batch_size=batch_size, base_lr=base_lr,
                                            train=TrainConfig(
                        model=self.model, sync=self.sync, num_workers=num_workers,
                        global_batch_size=global_batch_size, lr=lr, num_epochs=self.num_epochs,
                        seed=self.seed, train_limit=self.train_limit, test_limit=self.test_limit,
                        threads_per_worker=self.threads_per_worker, use_gpu=self.use_gpu,
                        sync_batchnorm=self.sync_batchnorm, bucket_cap_mb=self.bucket_cap_mb,
                        shared_memory=self.shared_memory,
                        warmup_epochs=self.warmup_epochs, precision=self.precision,
                        channels_last=self.channels_last)))
        return points

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict, *, source: str = "sweep options") -> "SweepConfig":
        """Build from JSON values (lists for tuples), as `to_dict` writes them.

        Unknown keys and values of the wrong type are a `UserError` naming them.
        """
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected an object of sweep options, "
                            f"got {type(values).__name__}")
        fields = {field.name: field.type for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise UserError(f"{source}: unknown option(s) {', '.join(unknown)}; the known ones "
                            f"are {', '.join(fields)}")
        typed = {key: _typed(value, fields[key], f"{source}: {key}") for key, value in values.items()}
        try:
            return cls(**typed)
        except UserError as error:
            raise UserError(f"{source}: {error}") from None


def _typed(value, annotation, what: str):
    """`value` checked against a field's annotation; JSON lists become tuples."""
    if typing.get_origin(annotation) is tuple:
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{what} must be a list, got {value!r}")
        item_type = typing.get_args(annotation)[0]
        return tuple(_typed(item, item_type, what) for item in value)
    if isinstance(annotation, types.UnionType):  # `int | None`
        if value is None:
            return None
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    accepted = (int, float) if annotation is float else annotation
    if isinstance(value, bool) and annotation is not bool or not isinstance(value, accepted):
        raise UserError(f"{what} must be {annotation.__name__}, got {value!r}")
    return value


@dataclass(frozen=True)
class GridPoint:
    """One trial of a sweep: the run's config and the grid values it came from."""

    batch_size: int
    """The grid's b (global or per worker, as the sweep's batch scaling says)."""
    base_lr: float
    train: TrainConfig


PRESETS: dict[str, dict] = {
    # 13.5's experiment: LeNet, batch 256 and lr 0.2 kept as the workers go 1 -> 2.
    "d2l-13.5": dict(model="lenet", workers=(1, 2), batch_sizes=(256,), lrs=(0.2,),
                     batch_scaling="global", num_epochs=10),
    # 13.5's exercises 1 and 2: the batch per worker fixed (global k*b), an lr grid
    # per worker count. workers=None: 1, 2, 4, ... up to what the cluster holds.
    "scaling": dict(model="lenet", workers=None, batch_sizes=(64, 256), lrs=(0.05, 0.1, 0.2, 0.4),
                    batch_scaling="per-worker", num_epochs=5),
    # 13.6: ResNet-18, batch 256 per GPU, lr 0.1 on one GPU scaled linearly (0.2 on two).
    "d2l-13.6": dict(model="resnet18", workers=(1, 2), batch_sizes=(256,), lrs=(0.1,),
                     batch_scaling="per-worker", lr_scaling="linear", num_epochs=10),
}
DEFAULT_PRESET = "d2l-13.5"
