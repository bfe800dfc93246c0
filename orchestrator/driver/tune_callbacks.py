"""What Tune calls as the sweep's trials report and end: the lines a person
reads (each trial's end, the estimate's revisions) and what ends a trial or
the whole sweep early (--max-hours, --stop-at-target, ASHA's rungs).

Tune pickles these objects, by their classes' module and name, with the
experiment (tuner.pkl) and its stopper with the controller's state: a sweep
started before they moved here from tune_experiment.py names them there, and
tune_experiment.py imports them, so that --resume still finds them.
"""

import math
import os
import signal
import threading

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from orchestrator.config.grid import SweepConfig
from orchestrator.config.options import TrainConfig
from orchestrator.driver.estimate import PointShape, SweepEstimate
from orchestrator.driver.placement import Placement
from orchestrator.records import Status, book_line, memory_text, target_line


class LiveEstimate(tune.Callback, tune.stopper.Stopper):
    """Tune's side of `estimate.SweepEstimate`: feeds it every result and every
    trial's end, prints what it says, and stops the sweep when it says so
    (--max-hours). One object, both callback and stopper, so that the stopper
    reads what the callback learnt."""

    # The limit of the command running now, not kept with the instance: Tune
    # restores a resumed sweep's stopper as it was when the sweep started.
    max_hours: float | None = None
    # This command's callback, which Tune sets up and feeds: the stopper asks it.
    # A resumed sweep's stopper is another object, the one Tune saved with its
    # controller's state and restores over the one it is given (Ray 2.60's
    # TuneController.__setstate__ keeps `_stopper`, not `_callbacks`), as it was
    # when the sweep stopped: it would never stop this command's run.
    current: "LiveEstimate | None" = None
    # With placements, the nodes the trials share out; a class default, which a
    # callback pickled by a sweep that kept no count (one before it) reads.
    nodes: int | None = None

    def __init__(self, sweep: SweepConfig, max_concurrent: int,
                 placements: dict[int, Placement] | None = None, nodes: int | None = None):
        self.points = [PointShape.of(point, placements[point.train.num_workers].num_nodes
                                     if placements else 1) for point in sweep.grid]
        self.max_concurrent, self.nodes = max_concurrent, nodes
        self.estimate = SweepEstimate(self.points, max_concurrent, nodes=nodes)

    def setup(self, **info):
        # Called as each command starts its run, a resumed one included: the
        # clock and the measurements are this command's.
        self.estimate = SweepEstimate(self.points, self.max_concurrent, nodes=self.nodes,
                                      max_hours=LiveEstimate.max_hours)
        self.stopped_by: str | None = None  # how --max-hours stopped this command's run
        LiveEstimate.current = self

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.estimate.add_result(_point_index(trial), result)
        for other in trials:  # a resumed sweep's trials finished before it started
            if other.status in (Trial.TERMINATED, Trial.ERROR):
                self.estimate.trial_ended(_point_index(other))
        self._print_revision()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.estimate.trial_ended(_point_index(trial))
        self._print_revision()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.estimate.trial_ended(_point_index(trial))
        self._print_revision()

    def _print_revision(self) -> None:
        for line in self.estimate.revise():
            print(line, flush=True)

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False  # the results come through on_trial_result

    def stop_all(self) -> bool:
        """--max-hours stops the sweep as a Ctrl-C does. Tune's own stop-all would
        end the running trials as finished and its search as done, and --resume
        would then find nothing to run (2 of 3 epochs trained, the second trial
        never started: seen with Ray 2.60)."""
        live = LiveEstimate.current or self
        if not live.estimate.stop:
            return False
        if live.stopped_by is None:
            live.stopped_by = "SIGINT" if interrupt_tune_run() else "stop-all"
            if live.stopped_by == "stop-all":
                print("Tune catches no SIGINT here: its running trials end as they are, "
                      "and --resume will not continue them", flush=True)
        return live.stopped_by == "stop-all"


def interrupt_tune_run() -> bool:
    """Stop the Tune run of this process as a Ctrl-C does: tune.run's documented
    SIGINT handling saves the experiment's state with its trials unfinished, which
    `Tuner.restore(resume_unfinished=True)` continues from their last checkpoints.
    False, sending nothing, where Tune catches no SIGINT (its loop off the main
    thread, or TUNE_DISABLE_SIGINT_HANDLER): there the signal would end the process."""
    handler = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or not callable(handler) or handler is signal.default_int_handler):
        return False
    os.kill(os.getpid(), signal.SIGINT)
    return True


def _point_index(trial: Trial) -> int:
    return trial.config["point"]["index"]


class TrialLinePrinter(tune.Callback):
    """One line as each trial ends: the book's line, or why it did not finish, and
    when it reached the target accuracy, if there is one."""

    def __init__(self, target_acc: float | None):
        self.target_acc = target_acc
        self.evaluations: dict[str, list[dict]] = {}  # every result is an evaluation

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.evaluations.setdefault(trial.trial_id, []).append(result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        evaluations = self.evaluations.get(trial.trial_id, [])
        history = [row for row in evaluations if row["end_of_epoch"]]
        parts = []
        if history:
            parts.append(book_line(history) + memory_text(history)
                         + (" (diverged)" if history[-1]["status"] == Status.DIVERGED else ""))
        if evaluations and self.target_acc is not None:
            parts.append(target_line(evaluations, self.target_acc))
        if parts:
            print(f"trial {trial.trial_id} done: {'; '.join(parts)}", flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"trial {trial.trial_id} failed: see {trial.path}", flush=True)


class ReachedTarget(tune.Stopper):
    """--stop-at-target: Tune ends a trial at its first evaluation at or above the
    target, and its workers go to the next trial."""

    def __init__(self, target_acc: float):
        self.target_acc = target_acc

    def __call__(self, trial_id: str, result: dict) -> bool:
        return result["test_acc"] >= self.target_acc

    def stop_all(self) -> bool:
        return False


class TimeToAccuracyASHA(ASHAScheduler):
    """ASHA (rungs in epochs) for a sweep with a target accuracy.

    The book's recipe is never stopped early: its time to the target is the
    baseline. A trial ended at the target before a rung still counts at that
    rung, with the accuracy that got it there: the bar for the trials after
    it (else the fastest learners, ended first, would set none).
    """

    def __init__(self, target_acc: float, **asha_options):
        super().__init__(**asha_options)
        self.target_acc = target_acc
        self.num_epochs = asha_options["max_t"]

    def on_trial_result(self, tune_controller, trial, result):
        if TrainConfig(**trial.config["point"]["train"]).is_book_recipe:
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result):
        if result.get("test_acc", 0.0) >= self.target_acc:
            # ASHA records a trial at the highest rung a result passes, once per rung.
            for epoch in range(math.ceil(result["epoch"]), self.num_epochs):
                super().on_trial_result(tune_controller, trial, {**result, "epoch": epoch})
        super().on_trial_complete(tune_controller, trial, result)
