"""Aggregation on a recorded sweep history: speedup, efficiency, statuses,
the isolation table and its edge flags, time to a target accuracy, the files,
and whether a sweep is complete."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from orchestrator.report import time_to_accuracy
from orchestrator.config.grid import SweepConfig
from orchestrator.records import Status
from orchestrator.report.plots import PLOT_FILES
from orchestrator.report.summary import summarize_trials
from orchestrator.report.sweep_report import render_report, write_results
from orchestrator.report.tables import isolation_table, scaling_table
from orchestrator.records import seconds_text, write_atomically
from orchestrator.driver.tune_results import all_trials_ended

# A sweep of LeNet, batch 256 (global), 3 epochs: lr 0.1/0.2/0.4 on 1 and 2 workers,
# one 4-worker trial that failed before its first epoch, and one trial in a
# group without a 1-worker baseline.
TRIALS = [
    # trial_id, workers, batch, lr, error
    ("t1-lr0.1", 1, 256, 0.1, ""), ("t1-lr0.2", 1, 256, 0.2, ""), ("t1-lr0.4", 1, 256, 0.4, ""),
    ("t2-lr0.1", 2, 256, 0.1, ""), ("t2-lr0.2", 2, 256, 0.2, ""), ("t2-lr0.4", 2, 256, 0.4, ""),
    ("t4-lr0.2", 4, 256, 0.2, "WorkerGroupError: worker died"),
    ("t2-b512", 2, 512, 0.2, ""),
]
# trial_id -> per-epoch (test_acc, samples_per_s, epoch_time_s, sync_time_s, status)
HISTORY = {
    "t1-lr0.1": [(0.50, 900, 10.0, 0.0, "ok"), (0.60, 1000, 9.0, 0.0, "ok"), (0.65, 1000, 9.0, 0.0, "ok")],
    "t1-lr0.2": [(0.55, 900, 10.0, 0.0, "ok"), (0.70, 1000, 9.0, 0.0, "ok"), (0.75, 1000, 9.0, 0.0, "ok")],
    "t1-lr0.4": [(0.60, 900, 10.0, 0.0, "ok"), (0.72, 1000, 9.0, 0.0, "ok"), (0.80, 1000, 9.0, 0.0, "ok")],
    "t2-lr0.1": [(0.50, 1500, 6.0, 1.0, "ok"), (0.61, 1800, 5.0, 1.0, "ok"), (0.66, 1800, 5.0, 1.0, "ok")],
    "t2-lr0.2": [(0.56, 1500, 6.0, 1.0, "ok"), (0.71, 1800, 5.0, 1.0, "ok"), (0.79, 1800, 5.0, 1.0, "ok")],
    "t2-lr0.4": [(0.10, 1500, 6.0, 1.0, "diverged")],  # stopped on non-finite gradients
    "t2-b512": [(0.40, 1900, 5.0, 0.5, "ok"), (0.50, 2000, 5.0, 0.5, "ok")],  # stopped early by ASHA
}


def _recorded() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": "scratch", "split": "even",
        "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0, "part": "",
        "seed": 0, "warmup_epochs": 0, "num_workers": workers,
        "batch_size": batch, "batch_scaling": "global", "base_lr": lr, "lr": lr,
        "momentum": 0.0, "global_batch_size": batch, "batch_size_per_worker": batch // workers,
        "steps_per_epoch": 60_000 // batch, "num_epochs": 3,
        "book_recipe": batch == 256 and lr == 0.2, "error": error,
        "early_stopping": True, "stop_at_target": False,
    } for trial_id, workers, batch, lr, error in TRIALS])
    epochs = pd.DataFrame([{
        "trial_id": trial_id, "epoch": epoch, "train_loss": 1.0 / epoch, "train_acc": acc,
        "test_acc": acc, "epoch_time_s": seconds, "eval_time_s": 0.5, "samples_per_s": rate, "sync_time_s": sync,
        "num_workers": int(trial_id[1]), "status": status, "devices": "[cpu]",
        "memory_format": "nchw", "layout_nchw_step_s": None, "layout_channels_last_step_s": None,
    } for trial_id, rows in HISTORY.items()
        for epoch, (acc, rate, seconds, sync, status) in enumerate(rows, start=1)])
    # One evaluation at each epoch's end; training seconds add up, wall adds 2 s each.
    epochs["train_s"] = epochs.groupby("trial_id")["epoch_time_s"].cumsum()
    evaluations = epochs[["trial_id", "epoch", "test_acc", "train_s"]].assign(
        wall_s=lambda frame: frame["train_s"] + 2 * frame["epoch"], eval_s=0.5)
    return trials, epochs, evaluations


@pytest.fixture
def summary() -> pd.DataFrame:
    return summarize_trials(*_recorded(), target_acc=0.75).set_index("trial_id")


def test_statuses(summary):
    assert summary.loc["t1-lr0.2", "status"] == "finished"
    assert summary.loc["t2-lr0.4", "status"] == "diverged"
    assert summary.loc["t4-lr0.2", "status"] == "failed"
    assert summary.loc["t4-lr0.2", "epochs_run"] == 0
    assert summary.loc["t2-b512", "status"] == "stopped early"


def test_without_early_stopping_an_unfinished_trial_was_interrupted():
    trials, epochs, evaluations = _recorded()
    summary = summarize_trials(trials.assign(early_stopping=False), epochs,
                               evaluations).set_index("trial_id")
    assert summary.loc["t2-b512", "status"] == "interrupted"
    assert summary.loc["t1-lr0.2", "status"] == "finished"


def test_speedup_is_throughput_against_the_matching_one_worker_trial(summary):
    # Medians: 1 worker 1000 samples/s, 2 workers 1800 samples/s.
    assert summary.loc["t2-lr0.2", "speedup"] == pytest.approx(1.8)
    assert summary.loc["t2-lr0.2", "efficiency"] == pytest.approx(0.9)
    one_worker = summary[summary["num_workers"] == 1]
    assert (one_worker["speedup"] == 1.0).all() and (one_worker["efficiency"] == 1.0).all()
    assert math.isnan(summary.loc["t2-b512", "speedup"])  # no 1-worker trial at batch 512
    assert math.isnan(summary.loc["t4-lr0.2", "speedup"])


def test_workers_that_shared_a_gpu_give_no_speedup():
    """Two workers on one GPU (--gpus-per-worker 0.5) took turns on it: their
    throughput is recorded, their speedup is not read (report.md, answers)."""
    trials, epochs, evaluations = _recorded()
    epochs["devices"] = "[cpu, cpu]"  # CPU slots: each worker its own core(s)
    epochs["worker_nodes"] = "['node-a', 'node-a']"
    on_gpus = epochs["trial_id"] == "t2-lr0.1"
    epochs.loc[on_gpus, "devices"] = "[cuda:0, cuda:0]"
    epochs.loc[epochs["trial_id"] == "t2-lr0.2", "devices"] = "[cuda:0, cuda:1]"
    summary = summarize_trials(trials, epochs, evaluations).set_index("trial_id")
    assert summary["shared_gpu"].to_dict() == {trial_id: trial_id == "t2-lr0.1"
                                               for trial_id in summary.index}
    assert math.isnan(summary.loc["t2-lr0.1", "speedup"])
    assert math.isnan(summary.loc["t2-lr0.1", "efficiency"])
    assert summary.loc["t2-lr0.1", "samples_per_s"] == 1800
    assert summary.loc["t2-lr0.2", "speedup"] == pytest.approx(1.8)  # two GPUs of its own
    # report.md's scaling table says which rows shared one (a review: a blank speedup
    # beside two others' said nothing of why); a sweep with none keeps its columns.
    from orchestrator.report.tables import scaling_table
    table = scaling_table(summary.reset_index())
    assert table.loc[table["shared_gpu"], "speedup"].isna().all()
    assert table["shared_gpu"].sum() == 1
    assert "shared_gpu" not in scaling_table(summary.reset_index().assign(shared_gpu=False))
    # The same device name on two nodes is two devices.
    epochs.loc[on_gpus, "worker_nodes"] = "['node-a', 'node-b']"
    summary = summarize_trials(trials, epochs, evaluations).set_index("trial_id")
    assert summary.loc["t2-lr0.1", "speedup"] == pytest.approx(1.8)
    # GPU workers whose sums went over gloo asked for a fraction of a GPU each (a
    # review, 2026-11-29): Ray may have placed them on two GPUs, but they summed
    # through the host, not NCCL's: no speedup read either.
    epochs["backend"] = "nccl"
    epochs.loc[epochs["trial_id"] == "t2-lr0.2", "backend"] = "gloo"
    summary = summarize_trials(trials, epochs, evaluations).set_index("trial_id")
    assert summary.loc["t2-lr0.2", "shared_gpu"]
    assert math.isnan(summary.loc["t2-lr0.2", "speedup"])
    assert summary.loc["t2-lr0.1", "speedup"] == pytest.approx(1.8)


def test_sync_share_and_accuracy_summaries(summary):
    row = summary.loc["t2-lr0.2"]
    # From the epochs after the first (one timing window): 1 + 1 s of 5 + 5 s.
    assert row["sync_share"] == pytest.approx(2.0 / 10.0)
    assert row["epoch_s"] == pytest.approx(5.0)
    assert row["final_test_acc"] == pytest.approx(0.79)
    assert row["best_test_acc"] == pytest.approx(0.79)
    assert row["mean_epoch_time_s"] == pytest.approx(16.0 / 3)


def test_the_best_accuracy_counts_mid_epoch_evaluations():
    """--evals-per-epoch scores the model inside epochs too: a peak there is the best."""
    trials, epochs, evaluations = _recorded()
    peak = pd.DataFrame([{"trial_id": "t2-lr0.2", "epoch": 1.5, "test_acc": 0.83,
                          "train_s": 7.0, "wall_s": 9.0, "eval_s": 0.5}])
    summary = summarize_trials(trials, epochs, pd.concat([evaluations, peak])).set_index(
        "trial_id")
    assert summary.loc["t2-lr0.2", "best_test_acc"] == pytest.approx(0.83)
    assert summary.loc["t2-lr0.2", "final_test_acc"] == pytest.approx(0.79)


def test_scaling_table_leaves_out_failed_trials(summary):
    table = scaling_table(summary.reset_index())
    assert 4 not in set(table["num_workers"])
    assert len(table) == 7


def test_isolation_table_picks_the_best_lr_and_flags_edges(summary):
    table = isolation_table(summary.reset_index()).set_index(["num_workers", "batch_size"])
    one = table.loc[(1, 256)]
    assert one["best_base_lr"] == 0.4 and one["on_edge"] == "yes (highest)"
    assert one["lrs_searched"] == "0.1 0.2 0.4"
    two = table.loc[(2, 256)]  # lr 0.4 diverged, so 0.2 wins, inside the range
    assert two["best_base_lr"] == 0.2 and two["on_edge"] == "no"
    assert table.loc[(2, 512), "on_edge"] == "only one lr searched"
    assert table.loc[(4, 256), "on_edge"] == "no usable trial"


def test_every_file_is_written_with_the_books_lines(tmp_path, summary):
    trials, epochs, evaluations = _recorded()
    paths = write_results(tmp_path, summarize_trials(trials, epochs, evaluations), epochs,
                          evaluations, title_lines=["- test"])
    assert set(paths) == {"trials.csv", "epochs.csv", "evaluations.csv", "report.md", *PLOT_FILES}
    assert all(path.stat().st_size > 0 for path in paths.values())
    assert len(pd.read_csv(paths["trials.csv"])) == len(TRIALS)
    assert len(pd.read_csv(paths["epochs.csv"])) == sum(map(len, HISTORY.values()))
    report = paths["report.md"].read_text()
    # The book's mean of every epoch (6, 5, 5 s), and the window every table times.
    assert ("test acc: 0.79, 5.3 sec/epoch on 2 workers [cpu] (epochs after the first: "
            "5.0 s each) [finished]") in report
    # The diverged trial's one epoch is its window: nothing to set beside it.
    assert "test acc: 0.10, 6.0 sec/epoch on 2 workers [cpu] [" in report
    assert "no epoch finished: WorkerGroupError: worker died [failed]" in report
    assert not list(tmp_path.glob(".*partial*"))


# Time to accuracy 0.80, evaluated 4 times an epoch: (epoch, test_acc, train_s, wall_s).
TARGET_EVALUATIONS = {
    # at the very first evaluation, then below it again: the first time counts
    "first": [(0.25, 0.81, 2.0, 7.0), (0.5, 0.79, 4.0, 9.5), (0.75, 0.83, 6.0, 12.0)],
    # exactly at the target, mid-epoch; listed out of order
    "mid": [(1.0, 0.82, 10.0, 16.4), (0.25, 0.50, 2.5, 8.0), (0.75, 0.80, 7.5, 13.6),
            (0.5, 0.70, 5.0, 10.8)],
    # the book's recipe, never there in 2 epochs
    "recipe": [(epoch / 4, 0.09 * epoch, 4.5 * epoch, 5.0 + 5 * epoch) for epoch in range(1, 9)],
}


def _target_records(recipe_acc_scale: float = 1.0, stop_at_target: bool = True
                    ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": "scratch", "split": "even",
        "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0, "part": "",
        "seed": 0, "warmup_epochs": 0, "num_workers": workers,
        "batch_size": batch, "batch_scaling": "global", "base_lr": lr, "lr": lr,
        "momentum": momentum, "global_batch_size": batch, "batch_size_per_worker": batch // workers,
        "steps_per_epoch": 60_000 // batch, "num_epochs": 2, "book_recipe": trial_id == "recipe",
        "error": "", "early_stopping": False, "stop_at_target": stop_at_target,
    } for trial_id, workers, batch, lr, momentum in [
        ("first", 2, 128, 0.05, 0.9), ("mid", 1, 256, 0.1, 0.9), ("recipe", 2, 256, 0.2, 0.0)]])
    evaluations = pd.DataFrame([
        {"trial_id": trial_id, "epoch": epoch,
         "test_acc": acc * (recipe_acc_scale if trial_id == "recipe" else 1), "train_s": train_s,
         "wall_s": wall_s, "eval_s": 0.3}
        for trial_id, rows in TARGET_EVALUATIONS.items() for epoch, acc, train_s, wall_s in rows])
    epochs = evaluations[evaluations["epoch"] == evaluations["epoch"].round()].assign(
        train_loss=0.5, train_acc=0.8, epoch_time_s=10.0, eval_time_s=0.3, samples_per_s=6000.0,
        sync_time_s=0.1, status="ok", devices="[cpu]", memory_format="nchw",
        layout_nchw_step_s=None, layout_channels_last_step_s=None).astype({"epoch": int}).merge(
        trials[["trial_id", "num_workers"]])
    return trials, epochs, evaluations


def _target_sweep(**options) -> pd.DataFrame:
    return summarize_trials(*_target_records(**options), target_acc=0.8)


def test_time_to_target_at_the_first_evaluation_mid_epoch_and_never():
    summary = _target_sweep().set_index("trial_id")
    assert summary.loc["first", ["epochs_to_target", "train_s_to_target",
                                 "wall_s_to_target"]].tolist() == [0.25, 2.0, 7.0]
    assert summary.loc["mid", ["epochs_to_target", "train_s_to_target",
                               "wall_s_to_target"]].tolist() == [0.75, 7.5, 13.6]
    assert summary.loc["recipe", ["epochs_to_target", "train_s_to_target",
                                  "wall_s_to_target"]].isna().all()
    assert summary.loc["recipe", "train_s_run"] == 36.0
    # Ended by --stop-at-target before their epochs were done.
    assert summary.loc["first", "status"] == summary.loc["mid", "status"] == "reached target"
    assert summary.loc["recipe", "status"] == "finished"
    without_stop = _target_sweep(stop_at_target=False).set_index("trial_id")
    assert without_stop.loc["first", "status"] == "interrupted"
    assert without_stop.loc["first", "train_s_to_target"] == 2.0


def test_ranking_and_the_recommended_line_against_the_books_recipe():
    summary = _target_sweep()
    assert list(time_to_accuracy.ranking(summary)["trial_id"]) == ["first", "mid"]
    # The recipe never got there: the factor is a lower bound, from its 36 s run.
    assert time_to_accuracy.recommendation(summary, 0.8) == (
        "2 workers, batch 128, lr 0.05 (momentum 0.9) reached 0.8 in 2.0 s of training, "
        "more than 18.00 times faster than the book's recipe on this cluster, which had not "
        "reached it after 36.0 s of training.")
    # Scaled up, the recipe reaches 0.8 at its 6th evaluation (1.5 epochs, 27 s).
    reached = _target_sweep(recipe_acc_scale=1.0 / 0.6)
    assert time_to_accuracy.recommendation(reached, 0.8).endswith(
        "13.50 times faster than the book's recipe on this cluster (27.0 s).")
    without_recipe = summary[~summary["book_recipe"]]
    assert "was not run in this sweep" in time_to_accuracy.recommendation(without_recipe, 0.8)
    # Where the sweep had more than one strategy or precision, the line names the best's.
    first = summary["trial_id"] == "first"
    strategies = summary.assign(sync=first.map({True: "sharded", False: "scratch"}),
                                precision=first.map({True: "bf16", False: "fp32"}))
    assert time_to_accuracy.recommendation(strategies, 0.8).startswith(
        "2 workers, batch 128, lr 0.05 (momentum 0.9), sync sharded, precision bf16 reached 0.8")


def test_the_report_has_the_time_to_accuracy_section_and_plot(tmp_path):
    trials, epochs, evaluations = _target_records()
    paths = write_results(tmp_path, summarize_trials(trials, epochs, evaluations, target_acc=0.8),
                          epochs, evaluations, title_lines=[], target_acc=0.8)
    report = paths["report.md"].read_text()
    section = report[report.index("## Time to accuracy"):report.index("## Files")]
    # Every trial is LeNet: the model is said once above the ranking, not in each row.
    assert "Every row: model lenet," in section and "| model |" not in section
    assert section.index("| first | 2 | 128 |") < section.index("| mid | 1 | 256 |")
    assert "2 workers did not reach it in 36.0 s of training [finished]" in section
    assert "**Recommended:** 2 workers, batch 128, lr 0.05 (momentum 0.9)" in section
    assert paths["test_acc_vs_time.png"].stat().st_size > 0
    trials = pd.read_csv(paths["trials.csv"])
    assert {"epochs_to_target", "train_s_to_target", "wall_s_to_target", "momentum"} <= set(trials)


@pytest.mark.reliability(
    fault="a result file write interrupted half way",
    lost="nothing: the previous complete file stays")
def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path):
    target = tmp_path / "trials.csv"
    target.write_text("old, complete\n")

    def crash_half_way(path):
        path.write_text("new, half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, crash_half_way)
    assert target.read_text() == "old, complete\n"
    assert list(tmp_path.iterdir()) == [target]


def test_a_stopped_trial_tune_calls_terminated_leaves_the_sweep_incomplete():
    # After a Ctrl-C, Tune once handed back a stopped trial as terminated.
    # Only the objects' counts are read, so a namespace stands in for Tune's grid.
    sweep = SweepConfig.from_dict(dict(workers=(1, 2), batch_sizes=(256,), lrs=(0.1, 0.2),
                                       num_epochs=3, scheduler="fifo"))
    every_trial_ended = SimpleNamespace(num_terminated=3, num_errors=1)
    trials, epochs, evaluations = _recorded()
    finished = summarize_trials(trials[trials.trial_id != "t2-b512"].assign(early_stopping=False),
                                epochs, evaluations)
    cut_short = summarize_trials(trials.assign(early_stopping=False), epochs, evaluations)
    assert all_trials_ended(every_trial_ended, sweep)
    assert not all_trials_ended(SimpleNamespace(num_terminated=2, num_errors=1), sweep)
    # Tune's count says every trial ended; the epochs say one did not.
    assert not (finished["status"] == Status.INTERRUPTED).any()
    assert list(cut_short[cut_short["status"] == Status.INTERRUPTED]["trial_id"]) == ["t2-b512"]


def test_seconds_in_sentences_keep_two_digits_however_short():
    """A quick sweep's epochs of 0.068 and 0.13 s were both "0.1 s" beside their
    speedup of 1.93; a full sweep's 15.1 and 0.83 s read as before."""
    assert [seconds_text(value) for value in (15.14, 9.05, 1.0, 0.131, 0.0676, 0)] == [
        "15.1", "9.1", "1.0", "0.13", "0.068", "0.0"]
    assert [seconds_text(value, 2) for value in (0.832, 0.47, 0.1, 0.0053)] == [
        "0.83", "0.47", "0.10", "0.0053"]


def test_the_report_names_the_steps_fp16s_loss_scale_skipped():
    trials, epochs, evaluations = _recorded()
    fp16 = trials["trial_id"] == "t1-lr0.2"
    trials.loc[fp16, "precision"] = "fp16"
    rows = epochs["trial_id"] == "t1-lr0.2"
    epochs["loss_scale"] = [32768.0 if fp16_row else math.nan for fp16_row in rows]
    epochs["skipped_steps"] = [2 if fp16_row and epoch == 1 else 0
                               for fp16_row, epoch in zip(rows, epochs["epoch"])]
    report = render_report(summarize_trials(trials, epochs, evaluations), epochs,
                           title_lines=[])
    line = next(line for line in report.splitlines() if line.startswith("- `t1-lr0.2`"))
    assert "fp16" in line and "fp16 loss scale 32768 at the end, 2 steps skipped" in line
    assert sum("loss scale" in line for line in report.splitlines()) == 1
