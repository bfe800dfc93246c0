"""The sweep's time left, revised after every epoch. Plain Python: the Tune
experiment feeds it each result (tune_callbacks.LiveEstimate), the unit tests
feed it synthetic ones.

How it counts:
- An epoch is its steps and the rest (evaluation, checkpoint, report): a
  step's seconds per (num_workers, model, batch per worker), the median over
  the epochs measured there, each epoch's training seconds over its steps; the
  rest per (num_workers, model), each epoch's wall seconds between its trial's
  consecutive epochs less its training seconds (for the first epoch seen of a
  trial, its evaluation seconds). So trials of one worker count whose epochs
  differ in steps (the exercises' global batch b and k*b) are not one figure.
- A step not measured yet borrows the nearest measured one of its model, the
  same batch per worker first, then the nearest worker count, scaled by the
  batch per worker (compute-bound: as if the speedup were linear); the rest
  the nearest worker count's, scaled as if linear. A model with no measured
  epoch has no sensible figure (ResNet-18 takes some 100 times LeNet's
  epoch): its epochs are left out and the line says so.
- The line prints seconds per epoch per (num_workers, model): the median of
  the epochs measured there, else guessed as above.
- Starting a trial: its first epoch's wall seconds less that epoch's own
  (Ray Train's worker group, the data to the workers); the median over the
  trials measured, added to each trial not yet started.
- The time left: each unfinished trial's remaining epochs (and start), summed
  and divided over min(concurrency, trials left), but never shorter than the
  longest of them (it runs on one slot whatever the others do). Where each
  trial holds whole nodes of its own, the nodes are what the trials share: a
  trial of n of the C nodes counts C / floor(C / n) times, the share of the
  nodes it keeps from the others (2 of 3 nodes: all 3, since no second such
  trial fits beside it).
"""

import math
import operator
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.config.grid import GridPoint
from orchestrator.records import counted

# A revision is printed when the end it forecasts moves by more than this share
# of the time left last printed (time passing alone changes nothing), ...
PRINT_CHANGE = 0.10
# ... or when this long has passed since the last line.
PRINT_PERIOD_S = 60.0

Group = tuple[int, str]  # (num_workers, model)
StepGroup = tuple[int, str, int]  # (num_workers, model, batch per worker)


@dataclass(frozen=True)
class PointShape:
    """What the estimate needs of a grid point."""

    num_workers: int
    model: str
    num_epochs: int
    """Per point: the exercises study times some trials over fewer epochs."""
    steps_per_epoch: int
    batch_per_worker: int
    num_nodes: int = 1
    """The whole nodes its trial holds where trials are placed on nodes of their own
    (placement.py); 1 where Ray places the workers."""

    @classmethod
    def of(cls, point: GridPoint, num_nodes: int = 1) -> "PointShape":
        train = point.train
        return cls(train.num_workers, train.model, train.num_epochs, train.steps_per_epoch,
                   train.batch_size_per_worker, num_nodes)

    @property
    def group(self) -> Group:
        return (self.num_workers, self.model)

    @property
    def step_group(self) -> StepGroup:
        return (self.num_workers, self.model, self.batch_per_worker)


class SweepEstimate:
    """The sweep's time left from the epochs measured so far; with `max_hours`,
    whether the sweep should stop (elapsed + time left exceeds it)."""

    def __init__(self, points: Sequence[PointShape], max_concurrent: int, *,
                 nodes: int | None = None, max_hours: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.points = list(points)
        # What the trials share out: the trials at once, or the nodes where each
        # trial holds whole ones.
        self.capacity = nodes or max_concurrent
        self.max_hours = max_hours
        self.clock = clock
        self.started_at_s = clock()  # elapsed counts from here: this command's start
        self.epochs_done = [0] * len(self.points)
        self.ended = [False] * len(self.points)
        self.last_epoch: dict[int, tuple[int, float]] = {}  # point -> (epoch, wall_s)
        self.epoch_s: dict[Group, list[float]] = {}
        self.step_s: dict[StepGroup, list[float]] = {}
        self.rest_s: dict[Group, list[float]] = {}
        self.start_s: list[float] = []
        self.printed: tuple[float, float] | None = None  # (when, forecast end) last printed
        self.stop = False

    def add_result(self, point_index: int, result: dict) -> None:
        """One result of the trial of grid point `point_index`; a mid-epoch
        evaluation ends no epoch and is ignored."""
        if not result["end_of_epoch"]:
            return
        epoch, wall_s = result["epoch"], result["wall_s"]
        own_s = result["epoch_time_s"] + result["eval_time_s"]
        previous = self.last_epoch.get(point_index)
        if previous is not None and previous[0] == epoch - 1:
            seconds = wall_s - previous[1]
        else:
            # A resumed trial's wall seconds go on from its checkpoint: only
            # a trial's very first epoch tells its start.
            seconds = own_s
            if epoch == 1:
                self.start_s.append(wall_s - own_s)
        point = self.points[point_index]
        self.epoch_s.setdefault(point.group, []).append(seconds)
        self.step_s.setdefault(point.step_group, []).append(
            result["epoch_time_s"] / point.steps_per_epoch)
        self.rest_s.setdefault(point.group, []).append(max(0.0, seconds - result["epoch_time_s"]))
        self.last_epoch[point_index] = (epoch, wall_s)
        self.epochs_done[point_index] = epoch

    def trial_ended(self, point_index: int) -> None:
        """Finished, stopped early or failed: none of its epochs are left."""
        self.ended[point_index] = True

    def seconds_per_epoch(self) -> dict[Group, tuple[float, bool]]:
        """Per group of the grid: (seconds an epoch, measured rather than guessed);
        a group of a model never measured is absent."""
        measured = {group: statistics.median(seconds) for group, seconds in self.epoch_s.items()}
        figures = {}
        for group in sorted({point.group for point in self.points}):
            if group in measured:
                figures[group] = (measured[group], True)
                continue
            same_model = [other for other in measured if other[1] == group[1]]
            if same_model:
                nearest = min(same_model, key=lambda other: (
                    abs(math.log(other[0] / group[0])), other[0]))
                figures[group] = (measured[nearest] * nearest[0] / group[0], False)
        return figures

    def epoch_seconds(self) -> list[float | None]:
        """Per point: its steps at the step's seconds plus the rest of an epoch,
        measured or borrowed (the module's docstring); None for a model never measured."""
        steps = {group: statistics.median(seconds) for group, seconds in self.step_s.items()}
        rests = {group: statistics.median(seconds) for group, seconds in self.rest_s.items()}

        def distance(one: tuple, other: tuple) -> float:
            return abs(math.log(one[0] / other[0]))

        figures = []
        for point in self.points:
            group, step_group = point.group, point.step_group
            same_model = [other for other in steps if other[1] == point.model]
            if not same_model:
                figures.append(None)
                continue
            if step_group in steps:
                step_s = steps[step_group]
            else:
                near = min(same_model, key=lambda other: (
                    abs(math.log(other[2] / step_group[2])), distance(other, group), other))
                step_s = steps[near] * step_group[2] / near[2]
            if group in rests:
                rest_s = rests[group]
            else:
                near = min((other for other in rests if other[1] == point.model),
                           key=lambda other: (distance(other, group), other[0]))
                rest_s = rests[near] * near[0] / group[0]
            figures.append(point.steps_per_epoch * step_s + rest_s)
        return figures

    def seconds_left(self) -> float | None:
        """The sweep's time left; None before its first epoch."""
        if not self.epoch_s:
            return None
        start_s = statistics.median(self.start_s) if self.start_s else 0.0
        trials_s, held = [], []  # each trial's seconds left, and the slots it holds
        for index, epoch_s in enumerate(self.epoch_seconds()):
            epochs_left = self.epochs_left(index)
            if epochs_left and epoch_s is not None:
                trials_s.append(epochs_left * epoch_s
                                + (start_s if self.epochs_done[index] == 0 else 0.0))
                num_nodes = self.points[index].num_nodes
                held.append(self.capacity / (self.capacity // num_nodes))
        if not trials_s:
            return 0.0
        # A trial on 2 of the nodes keeps another from them as long as it runs.
        slots = min(self.capacity, sum(held))
        return max(sum(map(operator.mul, trials_s, held)) / slots, max(trials_s))

    def epochs_left(self, point_index: int) -> int:
        if self.ended[point_index]:
            return 0
        return self.points[point_index].num_epochs - self.epochs_done[point_index]

    def revise(self) -> list[str]:
        """After a result or a trial's end: the lines to print now. The estimate
        when it moved enough or a minute passed; the first time elapsed + time
        left exceeds `max_hours`, the estimate and why the sweep stops."""
        left_s = self.seconds_left()
        if left_s is None or self.stop or not any(map(self.epochs_left, range(len(self.points)))):
            return []  # nothing to say yet, or any more
        now_s = self.clock()
        elapsed_s = now_s - self.started_at_s
        if self.max_hours is not None and elapsed_s + left_s > self.max_hours * 3600:
            self.stop = True
            self.printed = (now_s, now_s + left_s)
            return [self.line(left_s),
                    f"revised estimate: {_duration(elapsed_s)} elapsed + about "
                    f"{_duration(left_s)} left exceeds --max-hours {self.max_hours:g} "
                    f"({_duration(self.max_hours * 3600)}): stopping the sweep (--resume "
                    f"continues it)"]
        if self.printed is not None:
            printed_at_s, printed_end_s = self.printed
            moved = abs(now_s + left_s - printed_end_s) > PRINT_CHANGE * (
                printed_end_s - printed_at_s)
            if not moved and now_s - printed_at_s < PRINT_PERIOD_S:
                return []
        self.printed = (now_s, now_s + left_s)
        return [self.line(left_s)]

    def line(self, left_s: float) -> str:
        """e.g. `estimate: about 12 min left (37 of 60 epochs to go; measured 1 worker
        13.1 s/epoch, 2 workers 7.6 s/epoch; 5.2 s to start a trial)`."""
        several_models = len({point.model for point in self.points}) > 1
        figures = self.seconds_per_epoch()

        def figure(group: Group) -> str:
            model = f" {group[1]}" if several_models else ""
            return f"{counted(group[0], 'worker')}{model} {figures[group][0]:.1f} s/epoch"

        total = sum(point.num_epochs for point in self.points)
        left = sum(self.epochs_left(index) for index in range(len(self.points)))
        parts = [f"{left} of {counted(total, 'epoch')} to go",
                 "measured " + ", ".join(figure(group) for group in figures
                                         if figures[group][1])]
        guessed = [figure(group) for group in figures if not figures[group][1]]
        if guessed:
            parts.append(f"guessed (linear speedup) {', '.join(guessed)}")
        if self.start_s:
            parts.append(f"{statistics.median(self.start_s):.1f} s to start a trial")
        untimed: dict[str, int] = {}
        for index, point in enumerate(self.points):
            if (point.group not in figures) and self.epochs_left(index):
                untimed[point.model] = untimed.get(point.model, 0) + self.epochs_left(index)
        parts += [f"{model}'s {counted(epochs, 'epoch')} not timed yet, left out"
                  for model, epochs in untimed.items()]
        return f"estimate: about {_duration(left_s)} left ({'; '.join(parts)})"


def _duration(seconds: float) -> str:
    """Seconds, minutes or hours: two significant digits below 10 s (a quick
    sweep's 0.36 s is not 0 s)."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
