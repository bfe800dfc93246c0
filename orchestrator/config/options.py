"""Every option of a run and of a sweep, declared once, and the one place it is validated.

`TrainConfig` is one data-parallel run; `SweepConfig` is a base `TrainConfig`
plus the swept axes. Each field carries its default, a one-line doc and
(where the name alone is not it) its command-line flag: orchestrator/config/cli.py
generates both scripts' options from these fields, and `SweepConfig.from_dict`
reads a `--config` file or a `sweep.json` by them. A config is checked when it
is built, before anything touches a cluster.
"""

import dataclasses
import functools
import itertools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.config.dataset import TEST_SIZE, TRAIN_SIZE, even_shares
from orchestrator.errors import UserError
from orchestrator.config.studies import exercise_specs

Model = Literal["lenet", "resnet18"]
Sync = Literal["scratch", "bucketed", "ddp", "sharded"]
Split = Literal["even", "proportional"]
Precision = Literal["fp32", "bf16", "fp64"]
MODELS, SYNC_STRATEGIES, SPLITS, PRECISIONS = (typing.get_args(kind)
                                               for kind in (Model, Sync, Split, Precision))


def option(default, doc: str, *, flag: str | None = None, swept: bool = False,
           auto: bool = False):
    """A config field: its default, one line of doc, and its flag when not `--<name>`.

    `swept`: set for each grid point from the sweep's axes, not an option of
    its own. `auto`: the command line also takes `auto` (its default), decided
    once the cluster is known.
    """
    return field(default=default, metadata={"doc": doc, "flag": flag, "swept": swept,
                                            "auto": auto})


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One data-parallel training run, as every worker sees it."""

    model: Model = option("lenet", "which of the book's networks: lenet (13.5) or resnet18 (13.6)")
    num_workers: int = option(1, "Ray Train workers, each owning one device (the book's num_gpus)",
                              swept=True)
    global_batch_size: int = option(256, "examples per optimizer step, summed over all workers",
                                    swept=True)
    lr: float = option(0.2, "SGD learning rate applied to the global batch's mean gradient",
                       swept=True)
    momentum: float = option(0.0, "SGD momentum (0: the book's plain SGD)", swept=True)
    num_epochs: int = option(10, "passes over the training set", flag="--epochs")
    sync: Sync = option("scratch", "gradient sync: scratch (the book's per-tensor allreduce), "
                                   "bucketed (a few flat buffers), ddp (overlapped with backward), "
                                   "sharded (each worker sums and updates 1/k: ZeRO-1)",
                        swept=True)
    split: Split = option("even", "how each global batch is divided: even, or proportional to "
                                  "each worker's measured speed (13.6, exercise 2)", swept=True)
    split_interval_steps: int = option(0, "with --split proportional, re-set the shares every "
                                          "N steps; 0: at each epoch boundary")
    straggler_slowdown: float = option(1.0, "the last of several workers emulates a device this "
                                            "many times slower: it sleeps after its forward and "
                                            "backward (13.6, exercise 2)")
    pin_cores: bool = option(False, "pin each worker process to its own core(s), chosen by its "
                                    "local rank")
    seed: int = option(0, "seeds the initial weights (on rank 0) and the per-epoch shuffle")
    train_limit: int | None = option(None, "train on the first N training images only "
                                           "(quick runs)")
    test_limit: int | None = option(None, "score the first N test images only")
    threads_per_worker: int = option(1, "torch threads per worker, and the CPUs Ray reserves "
                                        "for it")
    use_gpu: bool = option(False, "each worker owns a GPU (NCCL) instead of a CPU slot (gloo); "
                                  "auto: when the cluster has GPUs", auto=True)
    sync_batchnorm: bool = option(False, "synchronise BatchNorm statistics across workers "
                                         "(GPU workers only)")
    warmup_epochs: int = option(0, "linear learning-rate warm-up epochs (Goyal et al., 2017)")
    bucket_cap_mb: float = option(25.0, "size cap of one gradient bucket for bucketed and ddp")
    shared_memory: bool = option(True, "CPU workers on one node sum scratch and bucketed "
                                       "gradients through its shared memory, not gloo's sockets")
    precision: Precision = option("fp32", "fp32; bf16: the forward pass under bfloat16 autocast "
                                          "(loss, weights, gradients and optimizer stay fp32); "
                                          "fp64: all in double precision", swept=True)
    channels_last: bool = option(False, "model and inputs in channels-last memory format "
                                        "(faster on GPUs)")
    max_failures: int = option(2, "worker-group restarts from the last checkpoint before the "
                                  "run is marked failed")
    target_acc: float | None = option(None, "record when test accuracy first reaches this "
                                            "(epochs, training and wall seconds to it)")
    evals_per_epoch: int = option(1, "evaluate test accuracy this many times per epoch, so a "
                                     "target is timed within 1/N of an epoch")

    def __post_init__(self):
        _check_choices(self)
        _require_int(self.num_workers, "number of workers", minimum=1)
        _require_int(self.global_batch_size, "batch size", minimum=1)
        if self.global_batch_size < self.num_workers:
            raise UserError(
                f"batch size {self.global_batch_size} is smaller than the {self.num_workers} "
                f"workers: every worker needs at least one example per step"
            )
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"learning rate must be a finite number > 0, got {self.lr!r}")
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise UserError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if self.target_acc is not None and not (
                isinstance(self.target_acc, (int, float)) and 0 < self.target_acc <= 1):
            raise UserError(f"target accuracy must be in (0, 1], got {self.target_acc!r}")
        _require_int(self.num_epochs, "epochs", minimum=1)
        _require_int(self.seed, "seed", minimum=0)
        _require_int(self.threads_per_worker, "threads per worker", minimum=1)
        _require_int(self.warmup_epochs, "warm-up epochs", minimum=0)
        _require_int(self.max_failures, "max failures", minimum=0)
        if self.warmup_epochs > self.num_epochs:
            raise UserError(
                f"warm-up epochs ({self.warmup_epochs}) exceed the {self.num_epochs} epochs"
            )
        if self.train_limit is not None:
            _require_int(self.train_limit, "train limit", minimum=1)
            if self.train_limit > TRAIN_SIZE:
                raise UserError(f"train limit {self.train_limit} is larger than the {TRAIN_SIZE} "
                                f"training images")
            if self.train_limit < self.global_batch_size:
                raise UserError(
                    f"train limit {self.train_limit} is smaller than one global batch "
                    f"({self.global_batch_size}): no step could run"
                )
        _require_int(self.evals_per_epoch, "evaluations per epoch", minimum=1)
        if self.evals_per_epoch > self.steps_per_epoch:
            raise UserError(f"{self.evals_per_epoch} evaluations per epoch exceed the "
                            f"{self.steps_per_epoch} steps of an epoch")
        if self.test_limit is not None:
            _require_int(self.test_limit, "test limit", minimum=1)
            if self.test_limit > TEST_SIZE:
                raise UserError(
                    f"test limit {self.test_limit} is larger than the {TEST_SIZE} test images"
                )
        if not (isinstance(self.straggler_slowdown, (int, float))
                and math.isfinite(self.straggler_slowdown) and self.straggler_slowdown >= 1):
            raise UserError(f"straggler slowdown must be a number >= 1, got "
                            f"{self.straggler_slowdown!r}")
        if not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise UserError(f"bucket cap must be > 0 MB, got {self.bucket_cap_mb!r}")
        _require_int(self.split_interval_steps, "split interval steps", minimum=0)
        for name in ("use_gpu", "sync_batchnorm", "shared_memory", "channels_last", "pin_cores"):
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
        """The even split; a proportional split starts from it."""
        return even_shares(self.global_batch_size, self.num_workers)

    @property
    def batch_size_per_worker(self) -> int:
        """The largest shard of the even split: what the busiest worker computes per step
        (a proportional split's shares are in each epoch's metrics)."""
        return -(-self.global_batch_size // self.num_workers)

    @property
    def resources_per_worker(self) -> dict[str, float]:
        """What Ray reserves for one worker: its threads' CPUs, and a GPU if it owns one."""
        return {"CPU": float(self.threads_per_worker), **({"GPU": 1.0} if self.use_gpu else {})}

    @property
    def is_book_recipe(self) -> bool:
        """13.5's own run (any number of workers): LeNet, global batch 256, lr 0.2,
        plain SGD, no warm-up, fp32; the baseline of time to accuracy."""
        return (self.model, self.global_batch_size, self.lr, self.momentum,
                self.warmup_epochs, self.precision) == ("lenet", 256, 0.2, 0.0, 0, "fp32")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _doc(config_class, name: str) -> str:
    return config_class.__dataclass_fields__[name].metadata["doc"]


@dataclass(frozen=True)
class GridPoint:
    """One trial of a sweep: the run's config and the grid values it came from."""

    index: int
    """Position in the sweep's grid: how a trial's results find their point."""
    batch_size: int
    """The grid's b (global or per worker, as the sweep's batch scaling says)."""
    base_lr: float
    train: TrainConfig
    batch_scaling: str
    part: str = ""
    """Which question of the exercises study the trial serves (exercises.py)."""


# The axes whose values are the run's own field values, by the field's name.
RUN_AXES = ("sync", "split", "precision")


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """A base run and the axes swept over it: workers x batch size x learning rate x
    momentum x sync strategy x split x precision."""

    base: TrainConfig = field(default_factory=TrainConfig)
    """Every option of the trials; its swept fields (num_workers, global_batch_size, lr,
    sync, split, precision) hold the first grid point's when built from options, and are
    replaced in every point."""
    workers: tuple[int, ...] = option(
        (TrainConfig.num_workers,), "workers, each owning one device (the book's num_gpus); "
                                    "a sweep takes a list, e.g. 1,2,4")
    batch_sizes: tuple[int, ...] = option(
        (TrainConfig.global_batch_size,),
        "batch size b: the global batch, or per worker with --batch-scaling per-worker; a sweep "
        "takes a list, e.g. 256,512", flag="--batch-size")
    lrs: tuple[float, ...] = option((TrainConfig.lr,), "base learning rate (see --lr-scaling); a "
                                                       "sweep takes a list, e.g. 0.05,0.1",
                                    flag="--lr")
    momentums: tuple[float, ...] = option((TrainConfig.momentum,), "SGD momentum; a sweep takes "
                                                                   "a list, e.g. 0,0.9",
                                          flag="--momentum")
    batch_scaling: Literal["global", "per-worker"] = option(
        "global", "global: the global batch is b whatever the workers (13.5's experiment); "
                  "per-worker: each worker gets b, the global batch is k*b (13.5, exercise 1)")
    lr_scaling: Literal["none", "linear"] = option(
        "none", "linear: lr = base lr * global batch / b (Goyal et al., 2017); none: the base lr")
    scheduler: Literal["fifo", "asha"] = option(
        "fifo", "asha stops trials early whose test accuracy lags (by epoch)")
    sync: tuple[Sync, ...] = option(
        (TrainConfig.sync,), f"{_doc(TrainConfig, 'sync')}; a sweep takes a list, e.g. "
                             f"scratch,bucketed")
    split: tuple[Split, ...] = option(
        (TrainConfig.split,), f"{_doc(TrainConfig, 'split')}; a sweep takes a list, e.g. "
                              f"even,proportional")
    precision: tuple[Precision, ...] = option(
        (TrainConfig.precision,), f"{_doc(TrainConfig, 'precision')}; a sweep takes a list, "
                                  f"e.g. fp32,bf16")

    stop_at_target: bool = option(False, "end a trial once its test accuracy reaches "
                                         "--target-acc, freeing its workers for the next")
    study: Literal["grid", "exercises"] = option(
        "grid", "grid: every combination of the axes; exercises: the trials the book's "
                "exercises need, drawn from the axes (orchestrator/config/studies.py)")
    calibrate: bool = option(
        True, "a sweep of two or more worker counts first times its transports and its "
              "workers' compute contention, for the report's scaling model")
    baseline_threads: int | None = option(
        0, "exercises: one more 1-worker trial with this many threads, the best single "
           "process of a CPU node (the preset's: a node's CPUs); 0: none")

    def __post_init__(self):
        _check_choices(self)
        _check_axes(self.workers, self.batch_sizes, self.lrs, self.momentums,
                    *(getattr(self, name) for name in RUN_AXES))
        for name in ("stop_at_target", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.stop_at_target and self.base.target_acc is None:
            raise UserError("--stop-at-target needs --target-acc: which accuracy to stop at")
        if self.baseline_threads is not None:
            _require_int(self.baseline_threads, "baseline threads", minimum=0)
        if self.study == "exercises":
            _check_one_value_each(self)
        _ = self.grid  # every grid point is a valid TrainConfig, or this raises

    @functools.cached_property
    def grid(self) -> tuple[GridPoint, ...]:
        """One point per (workers, batch size, lr, momentum, sync, split, precision),
        with its derived values (the exercises study: its own union of grids); computed once."""
        if self.study == "exercises":
            return self._exercise_grid()
        points = []
        for num_workers in self.workers:
            for batch_size in self.batch_sizes:
                for base_lr in self.lrs:
                    for momentum in self.momentums:
                        for run_values in itertools.product(*(getattr(self, name)
                                                              for name in RUN_AXES)):
                            train = dataclasses.replace(
                                self.base, momentum=momentum, **dict(zip(RUN_AXES, run_values)),
                                **_swept_values(num_workers, batch_size, base_lr,
                                                self.batch_scaling, self.lr_scaling))
                            points.append(GridPoint(len(points), batch_size, base_lr, train,
                                                    self.batch_scaling))
        return tuple(points)

    def _exercise_grid(self) -> tuple[GridPoint, ...]:
        specs = exercise_specs(
            workers=self.workers, batch_size=self.batch_sizes[0], lrs=self.lrs, syncs=self.sync,
            splits=self.split, num_epochs=self.base.num_epochs,
            straggler_slowdown=self.base.straggler_slowdown,
            baseline_threads=self.baseline_threads or 0,
            threads_per_worker=self.base.threads_per_worker, use_gpu=self.base.use_gpu)
        return tuple(GridPoint(index, spec.batch_size, spec.base_lr, dataclasses.replace(
            self.base, momentum=self.momentums[0], precision=self.precision[0],
            **{**_swept_values(spec.num_workers, spec.batch_size, spec.base_lr,
                               spec.batch_scaling, self.lr_scaling), **spec.run}),
            spec.batch_scaling, spec.part) for index, spec in enumerate(specs))

    def to_dict(self) -> dict:
        """The flat form of a `--config` file: the base's options beside the axes."""
        return {name: getattr(self.base if name in TRAIN_FIELDS else self, name)
                for name in OPTION_FIELDS}

    @classmethod
    def from_dict(cls, values: dict, *, source: str = "sweep options") -> "SweepConfig":
        """Build from the flat form (JSON lists for tuples), as `to_dict` writes it.

        Unknown keys and values of the wrong type are a `UserError` naming them
        and `source` (empty: the command line, whose errors need no source).
        """
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected an object of sweep options, "
                            f"got {type(values).__name__}")
        unknown = sorted(set(values) - set(OPTION_FIELDS))
        if unknown:
            raise UserError(f"{source}: unknown option(s) {', '.join(unknown)}; the known ones "
                            f"are {', '.join(OPTION_FIELDS)}")
        typed = {key: _typed(value, OPTION_FIELDS[key].type, f"{source}: {key}")
                 for key, value in values.items()}
        axes = {key: typed.pop(key) for key in SWEEP_FIELDS if key in typed}
        try:
            return cls(base=_first_point(typed, axes), **axes)
        except UserError as error:
            if not source:
                raise
            raise UserError(f"{source}: {error}") from None


def _swept_values(num_workers: int, batch_size: int, base_lr: float, batch_scaling: str,
                  lr_scaling: str) -> dict:
    """A grid point's swept TrainConfig fields, from its axis values."""
    global_batch_size = batch_size if batch_scaling == "global" else num_workers * batch_size
    lr = base_lr * global_batch_size / batch_size if lr_scaling == "linear" else base_lr
    return {"num_workers": num_workers, "global_batch_size": global_batch_size, "lr": lr}


def _first_point(options: dict, axes: dict) -> TrainConfig:
    """The base run, holding the first grid point's swept values: a base must be
    valid on its own (a train limit checked against its batch), and the grid
    checks every other point."""
    axes = {name: axes.get(name, spec.default) for name, spec in SWEEP_FIELDS.items()}
    _check_axes(axes["workers"], axes["batch_sizes"], axes["lrs"], axes["momentums"],
                *(axes[name] for name in RUN_AXES))
    return TrainConfig(**options, momentum=axes["momentums"][0],
                       **{name: axes[name][0] for name in RUN_AXES}, **_swept_values(
        axes["workers"][0], axes["batch_sizes"][0], axes["lrs"][0], axes["batch_scaling"],
        axes["lr_scaling"]))


# The run's own options (its swept fields come from the axes), and the sweep's.
TRAIN_FIELDS = {spec.name: spec for spec in dataclasses.fields(TrainConfig)
                if not spec.metadata["swept"]}
SWEEP_FIELDS = {spec.name: spec for spec in dataclasses.fields(SweepConfig) if spec.name != "base"}
OPTION_FIELDS = {**TRAIN_FIELDS, **SWEEP_FIELDS}
"""Every option, by name: the flat form of a sweep, and the command line."""


def _check_axes(workers: tuple, batch_sizes: tuple, lrs: tuple, momentums: tuple,
                syncs: tuple, splits: tuple, precisions: tuple) -> None:
    for name, values in (("workers", workers), ("batch sizes", batch_sizes),
                         ("learning rates", lrs), ("momentums", momentums),
                         ("sync strategies", syncs), ("splits", splits),
                         ("precisions", precisions)):
        if not values:
            raise UserError(f"the list of {name} is empty")
        if len(set(values)) != len(values):
            raise UserError(f"the list of {name} repeats a value: {list(values)}")


def _check_one_value_each(sweep: "SweepConfig") -> None:
    """The exercises study draws its own grids: an axis it takes one value of, or a
    batch scaling it sets per part, given otherwise would be silently dropped."""
    for name, values in (("batch sizes", sweep.batch_sizes), ("momentums", sweep.momentums),
                         ("precisions", sweep.precision)):
        if len(values) > 1:
            raise UserError(f"the exercises study uses one value of its {name}, got "
                            f"{list(values)}: give one, or sweep them with --study grid")
    if sweep.batch_scaling != "global":
        raise UserError(f"the exercises study sets each part's batch scaling itself, got "
                        f"{sweep.batch_scaling}: use --batch-scaling global or --study grid")


def _check_choices(config) -> None:
    """Every `Literal` field holds one of its choices: one line naming the first that does not."""
    for spec in dataclasses.fields(config):
        choices = typing.get_args(spec.type) if typing.get_origin(spec.type) is Literal else ()
        if choices and getattr(config, spec.name) not in choices:
            raise UserError(f"unknown {spec.name.replace('_', ' ')} {getattr(config, spec.name)!r}; "
                            f"choose one of {', '.join(choices)}")


def _require_int(value, what: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise UserError(f"{what} must be >= {minimum}, got {value}")


def _typed(value, annotation, what: str):
    """`value` checked against a field's annotation; JSON lists become tuples."""
    if typing.get_origin(annotation) is Literal:
        return value  # its choices are checked with the rest of the config
    if typing.get_origin(annotation) is tuple:
        item_type = typing.get_args(annotation)[0]
        if isinstance(value, str) and typing.get_origin(item_type) is Literal:
            # sync, split, precision: one value is a one-point axis (files written
            # before they were axes hold one)
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{what} must be a list, got {value!r}")
        return tuple(_typed(item, item_type, what) for item in value)
    if isinstance(annotation, types.UnionType):  # `int | None`
        if value is None:
            return None
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    accepted = (int, float) if annotation is float else annotation
    if isinstance(value, bool) and annotation is not bool or not isinstance(value, accepted):
        raise UserError(f"{what} must be {annotation.__name__}, got {value!r}")
    return value
