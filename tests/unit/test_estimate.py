"""The sweep's live estimate of its time left, fed synthetic results: revised
after every epoch, printed by the 10% / one-minute rule, and what --max-hours
reads."""

import pytest

from helpers import heavy_imports_of
from orchestrator.config.grid import SweepConfig
from orchestrator.config.options import TrainConfig
from orchestrator.driver.estimate import PRINT_PERIOD_S, PointShape, SweepEstimate


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def epoch(number: int, *, epoch_time_s: float, wall_s: float, eval_time_s: float = 0.0) -> dict:
    return {"end_of_epoch": True, "epoch": number, "epoch_time_s": epoch_time_s,
            "eval_time_s": eval_time_s, "wall_s": wall_s, "test_acc": 0.5}


def lenet(num_workers: int, num_epochs: int, steps_per_epoch: int = 1,
          global_batch: int = 256) -> PointShape:
    return PointShape(num_workers, "lenet", num_epochs, steps_per_epoch,
                      global_batch // num_workers)


def test_the_estimate_is_revised_after_every_epoch():
    estimate = SweepEstimate([lenet(1, 4)], max_concurrent=1, clock=Clock())
    assert estimate.seconds_left() is None
    # 5 s to start, then 10 s of training and 2 of evaluation.
    estimate.add_result(0, epoch(1, epoch_time_s=10, eval_time_s=2, wall_s=17))
    assert estimate.seconds_left() == 3 * 12
    # The second epoch takes 30 s of wall time (its checkpoint and report included).
    estimate.add_result(0, epoch(2, epoch_time_s=10, eval_time_s=2, wall_s=47))
    assert estimate.seconds_left() == 2 * (12 + 30) / 2
    estimate.add_result(0, epoch(3, epoch_time_s=10, eval_time_s=2, wall_s=59))
    assert estimate.seconds_left() == 1 * 12  # the median of 12, 30, 12
    assert "1 of 4 epochs to go" in estimate.line(estimate.seconds_left())


def test_trials_not_yet_started_count_their_epochs_and_their_start():
    # The exercises study gives some points fewer epochs.
    estimate = SweepEstimate([lenet(1, 3), lenet(1, 3), lenet(1, 2)], max_concurrent=1,
                             clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=10, eval_time_s=2, wall_s=20))
    start_s, epoch_s = 20 - 12, 12
    assert estimate.seconds_left() == 2 * epoch_s + (start_s + 3 * epoch_s) + (
        start_s + 2 * epoch_s)
    line = estimate.line(estimate.seconds_left())
    assert "7 of 8 epochs to go" in line and "8.0 s to start a trial" in line


def test_a_resumed_trials_first_epoch_tells_no_start():
    # Its wall seconds go on from the checkpoint of epoch 3.
    estimate = SweepEstimate([lenet(1, 5), lenet(1, 5)], max_concurrent=1, clock=Clock())
    estimate.add_result(0, epoch(4, epoch_time_s=10, wall_s=300))
    assert estimate.seconds_left() == 1 * 10 + 5 * 10
    assert "to start a trial" not in estimate.line(estimate.seconds_left())


def test_mid_epoch_evaluations_are_not_epochs():
    estimate = SweepEstimate([lenet(1, 2)], max_concurrent=1, clock=Clock())
    mid_epoch = {"end_of_epoch": False, "epoch": 0.5, "test_acc": 0.3, "train_s": 4.0,
                 "wall_s": 9.0, "eval_s": 1.0}
    estimate.add_result(0, mid_epoch)
    assert estimate.seconds_left() is None and estimate.revise() == []
    estimate.add_result(0, epoch(1, epoch_time_s=8, eval_time_s=2, wall_s=12))
    estimate.add_result(0, {**mid_epoch, "epoch": 1.5, "wall_s": 18.0})
    assert estimate.seconds_left() == 1 * 10
    assert "1 of 2 epochs to go" in estimate.line(estimate.seconds_left())


def test_a_group_not_measured_borrows_the_nearest_worker_count_as_a_guess():
    estimate = SweepEstimate([lenet(1, 2), lenet(2, 2), lenet(8, 2)], max_concurrent=1,
                             clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=12, wall_s=12))
    assert estimate.seconds_per_epoch() == {(1, "lenet"): (12, True), (2, "lenet"): (6, False),
                                            (8, "lenet"): (1.5, False)}
    assert estimate.seconds_left() == 12 + 2 * 6 + 2 * 1.5
    line = estimate.line(estimate.seconds_left())
    assert ("measured 1 worker 12.0 s/epoch; guessed (linear speedup) 2 workers 6.0 s/epoch, "
            "8 workers 1.5 s/epoch") in line
    # 8 workers measured: 2 is nearer to 1 (a factor 2) than to 8 (a factor 4).
    estimate.add_result(2, epoch(1, epoch_time_s=4, wall_s=4))
    assert estimate.seconds_per_epoch()[(2, "lenet")] == (6, False)
    estimate.add_result(1, epoch(1, epoch_time_s=7, wall_s=7))
    assert estimate.seconds_per_epoch()[(2, "lenet")] == (7, True)


def test_a_model_never_measured_is_left_out_and_named():
    estimate = SweepEstimate([lenet(1, 2), PointShape(1, "resnet18", 3, 1, 256)], max_concurrent=1,
                             clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=5, wall_s=5))
    assert estimate.seconds_left() == 5
    line = estimate.line(estimate.seconds_left())
    assert "4 of 5 epochs to go" in line
    assert "measured 1 worker lenet 5.0 s/epoch" in line
    assert "resnet18's 3 epochs not timed yet, left out" in line


def test_the_time_left_is_shared_over_the_concurrent_trials():
    points = [lenet(1, 2)] * 4

    def seconds_left(max_concurrent: int) -> float:
        estimate = SweepEstimate(points, max_concurrent, clock=Clock())
        estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
        return estimate.seconds_left()

    trials_s = [10, 20, 20, 20]
    assert seconds_left(1) == sum(trials_s)
    assert seconds_left(2) == sum(trials_s) / 2
    # 4 trials left on 8 slots: the sweep lasts as long as its longest trial.
    assert seconds_left(8) == max(trials_s)


def test_a_trial_on_several_whole_nodes_holds_them_all_while_it_runs():
    # Two like nodes, each trial on whole nodes of its own (placement.py): Tune runs
    # 2 trials at once, but a 2-node trial leaves no node to another.
    points = [lenet(1, 2)] * 2 + [PointShape(2, "lenet", 2, 1, 128, num_nodes=2)] * 2
    estimate = SweepEstimate(points, max_concurrent=2, nodes=2, clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    estimate.add_result(2, epoch(1, epoch_time_s=6, wall_s=6))
    one_node_s, two_nodes_s = [10, 20], [6, 12]
    assert estimate.seconds_left() == (sum(one_node_s) + 2 * sum(two_nodes_s)) / 2
    # Without the nodes' count the two-node trials would seem to run beside others.
    blind = SweepEstimate([lenet(1, 2)] * 2 + [lenet(2, 2)] * 2, max_concurrent=2, clock=Clock())
    blind.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    blind.add_result(2, epoch(1, epoch_time_s=6, wall_s=6))
    assert blind.seconds_left() == (sum(one_node_s) + sum(two_nodes_s)) / 2
    # A grid smaller than the nodes: a 1-node and a 2-node trial on 4 nodes run at once.
    small = SweepEstimate([points[0], points[2]], max_concurrent=2, nodes=4, clock=Clock())
    small.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    small.add_result(1, epoch(1, epoch_time_s=6, wall_s=6))
    assert small.seconds_left() == max(10, 6)
    # On 3 nodes, two 2-node trials cannot run beside each other: one after the other.
    odd = SweepEstimate(points[2:], max_concurrent=2, nodes=3, clock=Clock())
    odd.add_result(0, epoch(1, epoch_time_s=6, wall_s=6))
    assert odd.seconds_left() == pytest.approx(6 + 12)


def test_trials_that_ended_early_have_no_epochs_left():
    estimate = SweepEstimate([lenet(1, 4), lenet(1, 4)], max_concurrent=1, clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    estimate.trial_ended(0)  # stopped early by ASHA
    assert estimate.seconds_left() == 4 * 10
    estimate.trial_ended(1)  # failed before its first epoch
    assert estimate.seconds_left() == 0


def test_a_revision_is_printed_when_it_moves_the_end_by_more_than_10_percent():
    clock = Clock()
    estimate = SweepEstimate([lenet(1, 1)] * 11, max_concurrent=1, clock=clock)
    clock.now_s = 10
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    (line,) = estimate.revise()
    assert line.startswith("estimate: about 2 min left (10 of 11 epochs to go; measured 1 worker "
                           "10.0 s/epoch")
    estimate.trial_ended(1)  # 90 s left: the end moves by 10% of the 100 s printed
    assert estimate.revise() == []
    estimate.trial_ended(2)  # 80 s left: by 20%
    (line,) = estimate.revise()
    assert line.startswith("estimate: about 80 s left (8 of 11 epochs to go;")


def test_an_unchanged_estimate_is_printed_once_a_minute():
    clock = Clock()
    estimate = SweepEstimate([lenet(1, 20)], max_concurrent=1, clock=clock)
    printed_at_s = []
    epoch_s = 10
    for number in range(1, 15):
        clock.now_s = number * epoch_s  # every epoch at the same pace: the same end
        estimate.add_result(0, epoch(number, epoch_time_s=epoch_s, wall_s=clock.now_s))
        if estimate.revise():
            printed_at_s.append(clock.now_s)
    assert printed_at_s == [10, 10 + PRINT_PERIOD_S, 10 + 2 * PRINT_PERIOD_S]


def test_max_hours_stops_the_sweep_on_a_revised_estimate_that_grew_past_it():
    clock = Clock()
    limit_s = 200
    estimate = SweepEstimate([lenet(1, 10)], max_concurrent=1, max_hours=limit_s / 3600,
                             clock=clock)
    clock.now_s = 10
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    assert clock.now_s + estimate.seconds_left() < limit_s
    assert len(estimate.revise()) == 1 and not estimate.stop
    # The second epoch takes 40 s: 8 epochs left at the median of 10 and 40.
    clock.now_s = 50
    estimate.add_result(0, epoch(2, epoch_time_s=40, wall_s=50))
    assert estimate.seconds_left() == 8 * 25
    line, stopping = estimate.revise()
    assert estimate.stop
    assert line.startswith("estimate: about 3 min left (8 of 10 epochs to go;")
    assert stopping == (f"revised estimate: 50 s elapsed + about 3 min left exceeds "
                        f"--max-hours {limit_s / 3600:g} (3 min): stopping the sweep "
                        f"(--resume continues it)")
    # Said once: the trials Tune then stops print nothing more.
    estimate.trial_ended(0)
    assert estimate.revise() == [] and estimate.stop


def test_elapsed_counts_from_this_commands_start():
    # A resumed sweep: its estimate starts when the command does, not the sweep.
    clock = Clock()
    clock.now_s = 1000
    estimate = SweepEstimate([lenet(1, 3)], max_concurrent=1, max_hours=40 / 3600, clock=clock)
    clock.now_s = 1010
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    estimate.revise()
    assert not estimate.stop
    clock.now_s = 1020
    estimate.add_result(0, epoch(2, epoch_time_s=10, wall_s=20))
    estimate.revise()
    # 20 s elapsed + 10 s left is under 40 s; 1020 s + 10 s from the sweep's start are not.
    assert not estimate.stop


def test_nothing_is_printed_once_no_epoch_is_left():
    estimate = SweepEstimate([lenet(1, 2)], max_concurrent=1, clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=10, wall_s=10))
    assert len(estimate.revise()) == 1
    estimate.trial_ended(0)
    assert estimate.seconds_left() == 0 and estimate.revise() == []


@pytest.mark.parametrize("num_epochs", [1, 3])
def test_the_points_of_a_grid(num_epochs):
    sweep = SweepConfig(base=TrainConfig(num_epochs=num_epochs), workers=(1, 2))
    assert [PointShape.of(point) for point in sweep.grid] == [
        lenet(1, num_epochs, 234), lenet(2, num_epochs, 234)]  # 60000 // 256 steps


def test_the_estimate_imports_neither_ray_nor_torch():
    assert heavy_imports_of(["orchestrator.driver.estimate"]) == []


def test_max_hours_interrupts_tune_as_a_ctrl_c_and_only_where_tune_catches_it():
    """The stop is a SIGINT to this process, which Tune's run turns into a saved,
    resumable state (tests/cluster/test_sweep_script_on_ray.py resumes one). Where
    Tune catches no SIGINT, nothing is sent: it would end the process."""
    import signal
    import threading

    from orchestrator.driver.tune_callbacks import interrupt_tune_run
    caught = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert interrupt_tune_run() is False  # Python's own handler: KeyboardInterrupt
        signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
        off_main = []
        thread = threading.Thread(target=lambda: off_main.append(interrupt_tune_run()))
        thread.start()
        thread.join()
        assert off_main == [False] and caught == []
        assert interrupt_tune_run() is True
        assert caught == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_trials_of_one_worker_count_with_other_steps_an_epoch_are_not_one_figure():
    """The exercises on 8 GPUs: batch-global's 8 workers take 234 steps of 32 an
    epoch, batch-lr's 29 steps of 256. One figure per worker count gave those
    29-step epochs the 234-step one's 2 s; a step's seconds per batch per worker
    do not, and a measured batch-lr epoch settles its own."""
    global_b = lenet(8, 2, steps_per_epoch=234, global_batch=256)
    per_worker_b = lenet(8, 2, steps_per_epoch=29, global_batch=2048)
    estimate = SweepEstimate([global_b] + [per_worker_b] * 6, max_concurrent=1, clock=Clock())
    estimate.add_result(0, epoch(1, epoch_time_s=1.872, eval_time_s=0.128, wall_s=2.0))
    step_s = 1.872 / 234
    # Not measured: as if compute-bound (8 times the batch a step, 8 times the seconds).
    assert estimate.seconds_left() == pytest.approx(
        1 * 2.0 + 6 * 2 * (29 * 8 * step_s + 0.128))
    # One measured: a step of 256 on a GPU takes about what a step of 32 does.
    estimate.add_result(1, epoch(1, epoch_time_s=29 * 0.009, eval_time_s=0.128,
                                 wall_s=29 * 0.009 + 0.128))
    assert estimate.seconds_left() == pytest.approx(
        1 * 2.0 + 1 * (29 * 0.009 + 0.128) + 5 * 2 * (29 * 0.009 + 0.128))
    assert estimate.seconds_left() < 7
