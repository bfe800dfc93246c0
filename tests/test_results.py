"""Aggregation on a recorded sweep history: speedup, efficiency, statuses,
the isolation table and its edge flags, the files, and whether a sweep is
complete."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from orchestrator.config import SweepConfig
from orchestrator.results import (PLOT_FILES, isolation_table, scaling_table, summarize_trials,
                                  write_results)
from orchestrator.rundir import write_atomically
from orchestrator.sweep import is_complete

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


def _recorded() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": "scratch", "split": "even",
        "precision": "fp32", "num_workers": workers,
        "batch_size": batch, "batch_scaling": "global", "base_lr": lr, "lr": lr,
        "global_batch_size": batch, "batch_size_per_worker": batch // workers,
        "steps_per_epoch": 60_000 // batch, "num_epochs": 3, "error": error,
        "early_stopping": True,
    } for trial_id, workers, batch, lr, error in TRIALS])
    epochs = pd.DataFrame([{
        "trial_id": trial_id, "epoch": epoch, "train_loss": 1.0 / epoch, "train_acc": acc,
        "test_acc": acc, "epoch_time_s": seconds, "samples_per_s": rate, "sync_time_s": sync,
        "num_workers": int(trial_id[1]), "status": status, "devices": "[cpu]",
    } for trial_id, rows in HISTORY.items()
        for epoch, (acc, rate, seconds, sync, status) in enumerate(rows, start=1)])
    return trials, epochs


@pytest.fixture
def summary() -> pd.DataFrame:
    return summarize_trials(*_recorded()).set_index("trial_id")


def test_statuses(summary):
    assert summary.loc["t1-lr0.2", "status"] == "finished"
    assert summary.loc["t2-lr0.4", "status"] == "diverged"
    assert summary.loc["t4-lr0.2", "status"] == "failed"
    assert summary.loc["t4-lr0.2", "epochs_run"] == 0
    assert summary.loc["t2-b512", "status"] == "stopped early"


def test_without_early_stopping_an_unfinished_trial_was_interrupted():
    trials, epochs = _recorded()
    summary = summarize_trials(trials.assign(early_stopping=False), epochs).set_index("trial_id")
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


def test_sync_share_and_accuracy_summaries(summary):
    row = summary.loc["t2-lr0.2"]
    assert row["sync_share"] == pytest.approx(3.0 / 16.0)
    assert row["final_test_acc"] == pytest.approx(0.79)
    assert row["best_test_acc"] == pytest.approx(0.79)
    assert row["mean_epoch_time_s"] == pytest.approx(16.0 / 3)


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
    trials, epochs = _recorded()
    paths = write_results(tmp_path, summarize_trials(trials, epochs), epochs, title_lines=["- test"])
    assert set(paths) == {"trials.csv", "epochs.csv", "report.md", *PLOT_FILES}
    assert all(path.stat().st_size > 0 for path in paths.values())
    assert len(pd.read_csv(paths["trials.csv"])) == len(TRIALS)
    assert len(pd.read_csv(paths["epochs.csv"])) == sum(map(len, HISTORY.values()))
    report = paths["report.md"].read_text()
    assert "test acc: 0.79, 5.3 sec/epoch on 2 workers [cpu] [finished]" in report
    assert "no epoch finished: WorkerGroupError: worker died [failed]" in report
    assert not list(tmp_path.glob(".*partial*"))


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
    trials, epochs = _recorded()
    finished = summarize_trials(trials[trials.trial_id != "t2-b512"].assign(early_stopping=False),
                                epochs)
    cut_short = summarize_trials(trials.assign(early_stopping=False), epochs)
    assert is_complete(every_trial_ended, sweep, finished)
    assert not is_complete(every_trial_ended, sweep, cut_short)
    assert not is_complete(SimpleNamespace(num_terminated=2, num_errors=1), sweep, finished)
