"""A sweep's options: a base run (options.TrainConfig) and the axes swept over it,
expanded into grid points, one per trial; `SweepConfig.from_dict` reads a
`--config` file or a `sweep.json` by the fields' names.
"""

import dataclasses
import functools
import itertools
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.config.dataset import FASHION_MNIST, DataFacts
from orchestrator.config.options import (Precision, Split, Sync, TrainConfig, check_choices,
                                         field_doc, option, require_int, typed_value)
from orchestrator.config.studies import exercise_specs
from orchestrator.errors import UserError


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
# Trackers a sweep's trials can be sent to: Tune's own logger callbacks (driver/tracking.py).
Tracker = Literal["mlflow", "tensorboard", "wandb"]
TRACKERS = typing.get_args(Tracker)

@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """A base run and the axes swept over it: seed x workers x batch size x learning rate
    x momentum x sync strategy x split x precision."""

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
    seeds: tuple[int, ...] = option(
        (TrainConfig.seed,), f"{field_doc(TrainConfig, 'seed')}; a sweep takes a list, e.g. "
                             f"0,1,2: every point once per seed, replicas that the report "
                             f"averages and takes the noise from (--repeats N: 0 to N-1)",
        flag="--seed")
    batch_scaling: Literal["global", "per-worker"] = option(
        "global", "global: the global batch is b whatever the workers (13.5's experiment); "
                  "per-worker: each worker gets b, the global batch is k*b (13.5, exercise 1)")
    lr_scaling: Literal["none", "linear"] = option(
        "none", "linear: lr = base lr * global batch / b (Goyal et al., 2017); none: the base lr")
    scheduler: Literal["fifo", "asha"] = option(
        "fifo", "asha stops trials early whose test accuracy lags (by epoch)")
    sync: tuple[Sync, ...] = option(
        (TrainConfig.sync,), f"{field_doc(TrainConfig, 'sync')}; a sweep takes a list, e.g. "
                             f"scratch,bucketed")
    split: tuple[Split, ...] = option(
        (TrainConfig.split,), f"{field_doc(TrainConfig, 'split')}; a sweep takes a list, e.g. "
                              f"even,proportional")
    precision: tuple[Precision, ...] = option(
        (TrainConfig.precision,), f"{field_doc(TrainConfig, 'precision')}; a sweep takes a list, "
                                  f"e.g. fp32,bf16")

    stop_at_target: bool = option(False, "end a trial once its test accuracy reaches "
                                         "--target-acc, freeing its workers for the next")
    study: Literal["grid", "exercises"] = option(
        "grid", "grid: every combination of the axes; exercises: the trials the book's "
                "exercises need, drawn from the axes (orchestrator/config/studies.py)")
    calibrate: bool = option(
        True, "a sweep of two or more worker counts first times its transports and its "
              "workers' compute contention, for the report's scaling model (one of single "
              "workers with points left out counts their gradient bytes, for their what-if)")
    baseline_threads: int | None = option(
        0, "exercises: one more 1-worker trial with this many threads, the best single "
           "process of a CPU node (the preset's: a node's CPUs); 0: none")
    tracking: tuple[Tracker, ...] = option(
        (), "also send every trial's parameters and every epoch's metrics, under the sweep's "
            "id, to these trackers (Tune's logger callbacks; pip install "
            "'d2l-ray-orchestrator[tracking]'), e.g. mlflow,tensorboard")
    tracking_uri: str | None = option(
        None, "where MLflow keeps the runs: sqlite:///FILE.db, file:FOLDER or a server's "
              "http(s)://...; none: $MLFLOW_TRACKING_URI, else sqlite:///<out>/mlflow.db")

    def __post_init__(self):
        check_choices(self)
        _check_axes(self.seeds, self.workers, self.batch_sizes, self.lrs, self.momentums,
                    *(getattr(self, name) for name in RUN_AXES))
        for name in ("stop_at_target", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.stop_at_target and self.base.target_acc is None:
            raise UserError("--stop-at-target needs --target-acc: which accuracy to stop at")
        if self.baseline_threads is not None:
            require_int(self.baseline_threads, "baseline threads", minimum=0)
        if self.study == "exercises":
            _check_one_value_each(self)
            if not self.base.is_book_model:
                raise UserError(
                    f"the exercises study answers the book's exercises, about its own networks "
                    f"on Fashion-MNIST; for {self.base.model} on {self.base.dataset} sweep a "
                    f"grid (--study grid, as every other preset does): its answer sheet asks "
                    f"the same questions of any model")
        _check_tracking(self.tracking, self.tracking_uri)
        _ = self.grid  # every grid point is a valid TrainConfig, or this raises

    @functools.cached_property
    def grid(self) -> tuple[GridPoint, ...]:
        """One point per (seed, workers, batch size, lr, momentum, sync, split, precision),
        with its derived values (the exercises study: its own union of grids); computed once.
        The seed is the outer loop: each seed's replica of the grid runs after the last's,
        so that a drift of the machine shows as spread between replicas, not between points."""
        if self.study == "exercises":
            return self._exercise_grid()
        points = []
        for seed, num_workers, batch_size, base_lr, momentum, *run_values in itertools.product(
                self.seeds, self.workers, self.batch_sizes, self.lrs, self.momentums,
                *(getattr(self, name) for name in RUN_AXES)):
            train = dataclasses.replace(
                self.base, seed=seed, momentum=momentum, **dict(zip(RUN_AXES, run_values)),
                **_swept_values(num_workers, batch_size, base_lr, self.batch_scaling,
                                self.lr_scaling))
            points.append(GridPoint(len(points), batch_size, base_lr, train, self.batch_scaling))
        return tuple(points)

    @functools.cached_property
    def times_one_gpu_worker_against_others(self) -> bool:
        """Whether this GPU sweep times 1-worker trials against trials of more workers."""
        counts = {point.train.num_workers for point in self.grid}
        return self.base.use_gpu and len(counts) > 1 and min(counts) == 1

    @functools.cached_property
    def graph_held_off(self) -> str | None:
        """Why `--cuda-graph auto` captures no trial's step here, or None: on GPUs, a
        sweep of several worker counts times their steps against each other, and
        several workers' steps run eagerly (training/graphed.py), so its 1-worker
        trials' do too. A replayed 1-worker step against launched ones would read the
        graph's gain as a loss of scaling: on an H200 LeNet's step took 0.58 ms
        replayed, 2.2 ms launched (bench/notes/gpu_step.md), and as it is nothing but
        launches, 2 workers' eager steps take as long as one's: a speedup of 0.26 from
        the graph alone."""
        if self.base.cuda_graph != "auto" or not self.times_one_gpu_worker_against_others:
            return None
        counts = sorted({point.train.num_workers for point in self.grid})
        return (f"auto, in a sweep that times {', '.join(map(str, counts[:-1]))} and "
                f"{counts[-1]} workers against each other, whose several workers' steps run "
                f"eagerly (--cuda-graph on captures the 1-worker steps anyway)")

    def _exercise_grid(self) -> tuple[GridPoint, ...]:
        specs = exercise_specs(
            workers=self.workers, batch_size=self.batch_sizes[0], lrs=self.lrs, syncs=self.sync,
            splits=self.split, seeds=self.seeds, num_epochs=self.base.num_epochs,
            # The images the sweep loads (its --train-limit / --test-limit, else the data
            # set's): a point that needs more is left out, not started to fail.
            train_size=self.base.num_train_examples, test_size=self.base.num_test_examples,
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
    def from_dict(cls, values: dict, *, source: str = "sweep options",
                  facts_of: Callable[[str], DataFacts] | None = None) -> "SweepConfig":
        """Build from the flat form (JSON lists for tuples), as `to_dict` writes it.

        Unknown keys and values of the wrong type are a `UserError` naming them
        and `source` (empty: the command line, whose errors need no source).
        `facts_of(dataset)` reads the data set's facts (training/datasets.py);
        without it the trials are told Fashion-MNIST's.
        """
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected an object of sweep options, "
                            f"got {type(values).__name__}")
        unknown = sorted(set(values) - set(OPTION_FIELDS))
        if unknown:
            raise UserError(f"{source}: unknown option(s) {', '.join(unknown)}; the known ones "
                            f"are {', '.join(OPTION_FIELDS)}")
        typed = {key: typed_value(value, OPTION_FIELDS[key].type, f"{source}: {key}")
                 for key, value in values.items()}
        axes = {key: typed.pop(key) for key in SWEEP_FIELDS if key in typed}
        try:
            facts = facts_of(typed.get("dataset", FASHION_MNIST)) if facts_of else DataFacts()
            typed |= {name: getattr(facts, name) for name in FACT_FIELDS}
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
    _check_axes(axes["seeds"], axes["workers"], axes["batch_sizes"], axes["lrs"],
                axes["momentums"], *(axes[name] for name in RUN_AXES))
    return TrainConfig(**options, seed=axes["seeds"][0], momentum=axes["momentums"][0],
                       **{name: axes[name][0] for name in RUN_AXES}, **_swept_values(
        axes["workers"][0], axes["batch_sizes"][0], axes["lrs"][0], axes["batch_scaling"],
        axes["lr_scaling"]))

# The run's own options (its swept fields come from the axes), and the sweep's.
TRAIN_FIELDS = {spec.name: spec for spec in dataclasses.fields(TrainConfig)
                if not spec.metadata["swept"] and not spec.metadata["from_data"]}

SWEEP_FIELDS = {spec.name: spec for spec in dataclasses.fields(SweepConfig) if spec.name != "base"}

OPTION_FIELDS = {**TRAIN_FIELDS, **SWEEP_FIELDS}
# The run's facts of its data set (DataFacts), which no option sets.
FACT_FIELDS = tuple(spec.name for spec in dataclasses.fields(TrainConfig)
                    if spec.metadata["from_data"])

def _check_axes(seeds: tuple, workers: tuple, batch_sizes: tuple, lrs: tuple, momentums: tuple,
                syncs: tuple, splits: tuple, precisions: tuple) -> None:
    for name, values in (("seeds", seeds), ("workers", workers), ("batch sizes", batch_sizes),
                         ("learning rates", lrs), ("momentums", momentums),
                         ("sync strategies", syncs), ("splits", splits),
                         ("precisions", precisions)):
        if not values:
            raise UserError(f"the list of {name} is empty")
        if len(set(values)) != len(values):
            raise UserError(f"the list of {name} repeats a value: {list(values)}")

def _check_tracking(trackers: tuple, tracking_uri: str | None) -> None:
    for tracker in trackers:
        if tracker not in TRACKERS:
            raise UserError(f"unknown tracker {tracker!r}; choose one or more of "
                            f"{', '.join(TRACKERS)}")
    if len(set(trackers)) != len(trackers):
        raise UserError(f"the list of trackers repeats a value: {list(trackers)}")
    if tracking_uri is not None and "mlflow" not in trackers:
        # Only MLflow reads it: given alone, it would be silently ignored.
        raise UserError("--tracking-uri is where MLflow keeps the runs: add --tracking mlflow, "
                        "or leave the URI out")
    if tracking_uri is not None and not tracking_uri.strip():
        raise UserError("--tracking-uri is empty: give a URI, or leave it out")

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
