"""How many trials ran at once and on which nodes (report/timeline.py), and
timeline.png's bars, from synthetic epochs.csv rows read back as the report
reads them."""

import pandas as pd
import pytest

from orchestrator.report import plots, timeline
from orchestrator.report.summary import summarize_trials
from orchestrator.report.sweep_report import render_report

T0 = 1_800_000_000.0  # a Unix time; spans below are seconds after it
# trial_id -> worker groups: (start, [epoch ends], node per rank)
GROUPS = {
    "s_00000": [(0, [5, 10], ["node-a"])],
    "s_00001": [(0, [4, 8], ["node-b"])],
    # Starts as s_00000 ends: not beside it.
    "s_00002": [(10, [15, 20], ["node-a", "node-b"])],
    # Killed after its first epoch on node-c, resumed on node-d.
    "s_00003": [(0, [5], ["node-c"]), (6, [12], ["node-d"])],
}


def _epochs(tmp_path, groups=GROUPS) -> pd.DataFrame:
    rows = []
    for trial_id, runs in groups.items():
        epoch = 0
        for start, ends, nodes in runs:
            for end in ends:
                epoch += 1
                rows.append({"trial_id": trial_id, "epoch": epoch, "train_loss": 1.0,
                             "test_acc": 0.5, "epoch_time_s": 1.0, "eval_time_s": 0.1,
                             "samples_per_s": 100.0, "sync_time_s": 0.0, "status": "ok",
                             "num_workers": len(nodes), "devices": "[cpu]",
                             "memory_format": "nchw", "layout_nchw_step_s": None,
                             "layout_channels_last_step_s": None,
                             "worker_nodes": nodes, "run_started_unix_s": T0 + start,
                             "ended_unix_s": T0 + end})
    pd.DataFrame(rows).to_csv(tmp_path / "epochs.csv", index=False)
    return pd.read_csv(tmp_path / "epochs.csv")


def _summary(epochs: pd.DataFrame) -> pd.DataFrame:
    workers = epochs.groupby("trial_id")["num_workers"].first()
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": "scratch", "split": "even",
        "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0, "part": "",
        "num_workers": count, "batch_size": 256, "batch_scaling": "global",
        "base_lr": 0.1 * (index + 1), "lr": 0.1 * (index + 1), "momentum": 0.0,
        "global_batch_size": 256, "batch_size_per_worker": 256,
        "steps_per_epoch": 10, "num_epochs": 2, "book_recipe": False, "error": "",
        "early_stopping": False, "stop_at_target": False}
        for index, (trial_id, count) in enumerate(workers.items())])
    evaluations = pd.DataFrame(columns=["trial_id", "epoch", "test_acc", "train_s", "wall_s"])
    return summarize_trials(trials, epochs, evaluations)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.pyplot().close("all")


def test_spans_are_each_worker_groups_time_on_each_of_its_nodes(tmp_path):
    spans = timeline.trial_spans(_epochs(tmp_path))
    got = {(row.trial_id, row.node): (row.start_unix_s - T0, row.end_unix_s - T0)
           for row in spans.itertuples()}
    assert got == {("s_00000", "node-a"): (0, 10), ("s_00001", "node-b"): (0, 8),
                   ("s_00002", "node-a"): (10, 20), ("s_00002", "node-b"): (10, 20),
                   ("s_00003", "node-c"): (0, 5), ("s_00003", "node-d"): (6, 12)}


def test_trials_at_once_count_overlaps_and_not_a_start_at_anothers_end(tmp_path):
    spans = timeline.trial_spans(_epochs(tmp_path))
    # 0-8 s: s_00000, s_00001 and s_00003 (between its groups it still counts).
    assert timeline.max_trials_at_once(spans) == 3
    assert timeline.shared_nodes(spans) == []
    crowded = {**GROUPS, "s_00004": [(7, [9], ["node-a"])]}
    spans = timeline.trial_spans(_epochs(tmp_path, crowded))
    assert timeline.max_trials_at_once(spans) == 4
    assert timeline.shared_nodes(spans) == [("s_00000", "s_00004", "node-a")]
    ends_meet = {"a": [(0, [5], ["n"])], "b": [(5, [9], ["n"])]}
    spans = timeline.trial_spans(_epochs(tmp_path, ends_meet))
    assert (timeline.max_trials_at_once(spans), timeline.shared_nodes(spans)) == (1, [])


def test_epochs_without_times_give_no_spans_and_say_so(tmp_path):
    epochs = _epochs(tmp_path).drop(columns=["run_started_unix_s", "ended_unix_s"])
    assert timeline.trial_spans(epochs).empty
    assert timeline.max_trials_at_once(timeline.trial_spans(epochs)) == 0
    report = render_report(_summary(epochs), epochs, title_lines=[])
    assert "Trials at once: not recorded" in report
    figure = plots.plot_timeline(_summary(epochs), epochs)
    assert figure.axes[0].texts[0].get_text() == "no start and end times recorded"


def test_the_report_says_how_many_ran_at_once_and_whether_any_shared_a_node(tmp_path):
    epochs = _epochs(tmp_path)
    report = render_report(_summary(epochs), epochs, title_lines=[])
    assert ("Trials at once: at most 3, on 4 nodes; no two trials shared a node while both "
            "ran (`timeline.png`).") in report
    assert "- `timeline.png`" in report
    crowded = _epochs(tmp_path, {**GROUPS, "s_00004": [(7, [9], ["node-a"])]})
    assert "at most 4, on 4 nodes; 1 pair of trials shared a node" in render_report(
        _summary(crowded), crowded, title_lines=[])


def test_the_timeline_draws_a_bar_per_span_on_a_row_per_node(tmp_path):
    epochs = _epochs(tmp_path)
    figure = plots.plot_timeline(_summary(epochs), epochs)
    (axes,) = figure.axes
    assert [label.get_text() for label in axes.get_yticklabels()] == [
        "node-a", "node-b", "node-c", "node-d"]
    bars = {(round(bar.get_x()), round(bar.get_y() + bar.get_height() / 2), round(bar.get_width()))
            for bar in axes.patches}
    # (start s, node row, length s): s_00002's two nodes are two bars at 10 s.
    assert bars == {(0, 0, 10), (0, 1, 8), (10, 0, 10), (10, 1, 10), (0, 2, 5), (6, 3, 6)}
    assert sorted(text.get_text() for text in axes.texts) == [
        "00000", "00001", "00002", "00002", "00003", "00003"]
    assert "at most 3 at once" in figure.get_suptitle()
    # Coloured by workers: the 2-worker trial's bars share a colour of their own.
    colors = {bar.get_facecolor() for bar in axes.patches}
    assert len(colors) == 2
    paths = {name: tmp_path / name for name in plots.PLOT_FILES}
    plots.save_png(figure, paths["timeline.png"])
    assert paths["timeline.png"].stat().st_size > 5_000


def _timed_epochs(tmp_path, runs) -> pd.DataFrame:
    """One trial's epochs with wall_s: `runs` as GROUPS's, every epoch 1 s of
    training and 0.1 s of evaluation; the trial began in Tune at T0 - 2."""
    epochs = _epochs(tmp_path, {"t_00000": runs})
    epochs["wall_s"] = epochs["ended_unix_s"] - (T0 - 2)
    return epochs


def test_a_trials_time_is_split_into_its_fixed_costs_and_its_training(tmp_path):
    # Tune starts the trial at -2, its workers start at 0; epochs end at 5 and 7
    # (1 s training and 0.1 s evaluation each); restarted at 9, its epoch ends at 12.
    epochs = _timed_epochs(tmp_path, [(0, [5, 7], ["n"]), (9, [12], ["n"])])
    # Each epoch began 1.5 s before its end: 0.4 s of it neither training nor
    # evaluating (a mid-epoch evaluation's report and checkpoint).
    epochs["started_unix_s"] = epochs["ended_unix_s"] - 1.5
    split = timeline.trial_time_split(epochs)
    assert split == pytest.approx({"starting workers": 2.0,
                                   "preparing": (3.5 - 0) + (10.5 - 9),
                                   "training": 3.0, "evaluating": 0.3,
                                   "inside epochs": 3 * 0.4,
                                   "between epochs": 5.5 - 5})
    # Every second of the trial, from its start in Tune to its last epoch's end, is
    # in one part but the restart's gap (the first group's last end at 7 s to 9 s).
    assert sum(split.values()) == pytest.approx(12 + 2 - (9 - 7))
    # Epochs recorded before the epoch's start was: the rest of an epoch counts as
    # between epochs, or as preparing in the first.
    older = timeline.trial_time_split(epochs.drop(columns=["started_unix_s"]))
    assert older == pytest.approx({**split, "preparing": (5 - 1.1) + (12 - 1.1 - 9),
                                   "inside epochs": 0.0, "between epochs": 2 - 1.1})
    assert timeline.trial_time_split(epochs.drop(columns=["wall_s"])) == {}


def test_the_wall_time_is_split_into_calibration_trials_and_tunes_share(tmp_path):
    epochs = _timed_epochs(tmp_path, [(0, [5, 7], ["n"])])
    sessions = [{"ended": "x", "wall_s": 20, "calibration_s": 6.0, "trials_s": 12.0}]
    rows = {row["part"].split(" (")[0]: row for row in timeline.time_split_rows(sessions, epochs)}
    assert rows["calibration"]["seconds"] == 6.0 and rows["calibration"]["share"] == "30%"
    assert rows["- training"]["seconds"] == 2.0
    # The trial's span is 9 s of Tune's 12: 3 s around it; 2 s outside both.
    assert rows["- Tune around them"]["seconds"] == pytest.approx(3.0)
    assert rows["the rest"]["seconds"] == 2.0
    report = render_report(_summary(epochs), epochs, title_lines=[],
                           time_split=timeline.time_split_rows(sessions, epochs))
    assert "## Where the time went" in report and "| - training (the epochs' times) | 2 |" in report
    # A session from before these parts were timed, even beside a timed one: no section.
    assert timeline.time_split_rows([{"ended": "x", "wall_s": 20}], epochs) == []
    assert timeline.time_split_rows([{"ended": "x", "wall_s": 20}, *sessions], epochs) == []
    assert "Where the time went" not in render_report(_summary(epochs), epochs, title_lines=[])
