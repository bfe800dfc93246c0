"""Sync strategy, split and precision as sweep axes: lists on the command line
and in files, one line and exit 2 for a bad list, and results grouped by them."""

import pandas as pd
import pytest

from helpers import run_script
from orchestrator.config import cli
from orchestrator.driver import checks
from orchestrator.config.options import SPLITS
from orchestrator.config.grid import SweepConfig
from orchestrator.report.summary import summarize_trials
from orchestrator.report.sweep_report import render_report
from orchestrator.report.tables import strategy_table


def test_each_axis_takes_a_list_and_the_grid_crosses_them():
    argv = ["--workers", "1,2", "--sync", "scratch,bucketed,ddp", "--split", ",".join(SPLITS),
            "--precision", "fp32,bf16"]
    sweep = SweepConfig.from_dict(cli.config_options(cli.sweep_parser("").parse_args(argv)),
                                  source="")
    points = {(p.train.num_workers, p.train.sync, p.train.split, p.train.precision)
              for p in sweep.grid}
    assert len(sweep.grid) == len(points) == 2 * 3 * 2 * 2
    assert SweepConfig.from_dict(sweep.to_dict()) == sweep


def test_train_py_takes_one_value_of_each():
    run, _ = checks.run_request(cli.train_parser("").parse_args(
        ["--sync", "ddp", "--split", "proportional", "--precision", "fp64"]))
    assert (run.sync, run.split, run.precision) == ("ddp", "proportional", "fp64")


def test_a_file_holding_one_value_is_a_one_point_axis():
    # As --config files and sweep.json held them before these were axes.
    sweep = SweepConfig.from_dict({"workers": [1, 2], "sync": "bucketed", "precision": "bf16"})
    assert {(p.train.sync, p.train.precision) for p in sweep.grid} == {("bucketed", "bf16")}
    assert sweep.sync == ("bucketed",)


@pytest.mark.reliability(fault="sweep.py bad sync, split or precision list", lost="nothing")
@pytest.mark.parametrize("args, fragment", [
    (["--sync", "scratch,,ddp"], "--sync: an empty item in 'scratch,,ddp'"),
    (["--sync", "scratch,ring"], "unknown sync 'ring'; choose one of scratch, bucketed, ddp, sharded"),
    (["--split", "even,lopsided"], "unknown split 'lopsided'; choose one of even, proportional"),
    (["--precision", "fp32,"], "--precision: an empty item in 'fp32,'"),
    (["--split", "even,even"], "the list of splits repeats a value"),
    (["--split-interval-steps", "-1"], "split interval steps must be >= 0"),
])
def test_bad_lists_are_one_line_and_exit_2(tmp_path, args, fragment):
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", *args, "--out", str(out_dir), timeout_s=60)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not out_dir.exists()


# Two strategies, each on 1 and 2 workers: (trial, sync, split, workers, samples/s, s/epoch, sync s)
TRIALS = [("s1", "scratch", "even", 1, 1000, 10.0, 0.0),
          ("s2", "scratch", "even", 2, 1600, 6.0, 1.5),
          ("d1", "ddp", "even", 1, 800, 12.0, 0.0), ("d2", "ddp", "even", 2, 1200, 8.0, 1.0),
          ("p2", "scratch", "proportional", 2, 1500, 6.5, 1.0)]


def _summary() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": sync, "split": split, "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0, "part": "",
        "num_workers": workers, "batch_size": 256, "batch_scaling": "global", "base_lr": 0.2,
        "lr": 0.2, "momentum": 0.0, "global_batch_size": 256, "batch_size_per_worker": 256 // workers,
        "steps_per_epoch": 234, "num_epochs": 2, "error": "", "early_stopping": False,
        "stop_at_target": False,
    } for trial_id, sync, split, workers, *_ in TRIALS])
    epochs = pd.DataFrame([{
        "trial_id": trial_id, "epoch": epoch, "train_loss": 1.0, "train_acc": 0.5,
        "test_acc": 0.5, "epoch_time_s": seconds, "eval_time_s": 0.5, "samples_per_s": rate, "sync_time_s": sync_s,
        "num_workers": workers, "status": "ok", "devices": "[cpu]",
        "worker_shares": [256] if workers == 1 else [128, 128] if epoch == 1 else [170, 86],
        "worker_compute_s": [seconds] if workers == 1 else [2.0, 4.0] if epoch == 1 else [3.0, 3.1],
        # s2 chose its memory format (auto), the others were given theirs
        "memory_format": "channels-last" if trial_id == "s2" else "nchw",
        "layout_nchw_step_s": 0.112 if trial_id == "s2" else None,
        "layout_channels_last_step_s": 0.083 if trial_id == "s2" else None,
    } for trial_id, _, _, workers, rate, seconds, sync_s in TRIALS for epoch in (1, 2)])
    no_evaluations = pd.DataFrame(columns=["trial_id", "epoch", "test_acc", "train_s"])
    return summarize_trials(trials, epochs, no_evaluations), epochs


def test_speedup_is_against_the_one_worker_trial_of_the_same_strategy():
    summary, _ = _summary()
    speedup = summary.set_index("trial_id")["speedup"]
    assert speedup["s2"] == pytest.approx(1.6) and speedup["d2"] == pytest.approx(1.5)
    assert pd.isna(speedup["p2"])  # no 1-worker trial of the proportional split
    table = strategy_table(summary).set_index(["sync", "split", "num_workers"])
    assert table.loc[("ddp", "even", 2), "epoch_s"] == pytest.approx(8.0)
    assert table.loc[("ddp", "even", 2), "sync_share"] == pytest.approx(1.0 / 8.0)
    assert table.loc[("scratch", "even", 2), "speedup"] == pytest.approx(1.6)


def test_the_report_compares_strategies_and_shows_each_workers_share():
    summary, epochs = _summary()
    report = render_report(summary, epochs, title_lines=[])
    assert "## Strategies" in report and "## Split per worker" in report
    # What every row shares is said once above the table, not repeated in a column.
    assert "Every row: num_workers 2, last_epoch 2." in report
    assert ("| p2 | scratch | proportional | 128 / 128 | 2.00 / 4.00 | 170 / 86 "
            "| 3.00 / 3.10 |") in report
    assert ("`s2` 2 workers, batch 256 (global), lr 0.2, sync scratch, split even, fp32, memory "
            "format channels-last (auto: NCHW 0.112 s, channels-last 0.083 s a step): ") in report
    assert "split even, fp32, memory format nchw: " in report  # s1: given, not timed


def test_each_trials_line_names_the_transport_its_gradients_took():
    summary, epochs = _summary()
    epochs["transport"] = epochs["trial_id"].map(
        {"s1": "none", "s2": "shared memory", "d1": "none", "d2": "gloo", "p2": "gloo"})
    report = render_report(summary, epochs, title_lines=[])
    assert "`d2` 2 workers, batch 256 (global), lr 0.2, sync ddp, split even, fp32, over gloo," in report
    assert "sync scratch, split even, fp32, over shared memory, memory format" in report
    assert "`s1` 1 worker, batch 256 (global), lr 0.2, sync scratch, split even, fp32, memory" in report
