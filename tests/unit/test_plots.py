"""The sweep's plots stay readable at 24 trials: a legend names values, not
trials, and the speedup draws a line per batch, not per lr."""

import itertools

import pandas as pd
import pytest

from orchestrator.report import plots
from orchestrator.report.summary import summarize_trials

WORKERS = (1, 2, 4)
BATCHES = (128, 256)
LRS = (0.05, 0.1, 0.2, 0.4)


def _sweep(workers=WORKERS, batches=BATCHES, lrs=LRS, syncs=("scratch",)):
    """A finished sweep of LeNet, 3 epochs per trial: throughput grows with workers
    and batch and is about the same at every lr; accuracy grows with lr and falls
    a little with workers."""
    points = list(itertools.product(syncs, workers, batches, lrs))
    trials = pd.DataFrame([{
        "trial_id": f"t{index}", "model": "lenet", "sync": sync, "split": "even",
        "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0, "part": "",
        "num_workers": workers, "batch_size": batch, "batch_scaling": "global", "base_lr": lr,
        "lr": lr, "momentum": 0.0, "global_batch_size": batch,
        "batch_size_per_worker": batch // workers, "steps_per_epoch": 60_000 // batch,
        "num_epochs": 3, "book_recipe": batch == 256 and lr == 0.2, "error": "",
        "early_stopping": False, "stop_at_target": False,
    } for index, (sync, workers, batch, lr) in enumerate(points)])
    epochs = pd.DataFrame([{
        "trial_id": f"t{index}", "epoch": epoch, "train_loss": 1.0 / epoch,
        "train_acc": 0.5 + 0.1 * epoch,
        "test_acc": min(0.9, 0.4 + lr * epoch / 2 + 0.05 * epoch) - 0.02 * workers,
        "epoch_time_s": 60_000 / rate, "eval_time_s": 0.5, "samples_per_s": rate,
        "sync_time_s": 0.1 * (workers - 1), "num_workers": workers, "status": "ok",
        "devices": "[cpu]",
    } for index, (sync, workers, batch, lr) in enumerate(points)
        for epoch in (1, 2, 3)
        for rate in [1000 * workers ** (0.6 + batch / 1280) * (1 + lr * (workers - 1) / 4)]])
    epochs["train_s"] = epochs.groupby("trial_id")["epoch_time_s"].cumsum()
    # One trial after another on one node (timeline.png).
    epochs["worker_nodes"] = [["node-a"]] * len(epochs)
    epochs["run_started_unix_s"] = 1.8e9 + 1000.0 * epochs["trial_id"].str[1:].astype(int)
    epochs["ended_unix_s"] = epochs["run_started_unix_s"] + epochs["train_s"]
    evaluations = epochs[["trial_id", "epoch", "test_acc", "train_s"]].assign(
        wall_s=lambda frame: frame["train_s"] + 2 * frame["epoch"], eval_s=0.5)
    return summarize_trials(trials, epochs, evaluations, target_acc=0.8), epochs, evaluations


def _figures(summary, epochs, evaluations) -> dict:
    return {"test_acc_by_epoch.png": plots.plot_test_acc_by_epoch(summary, epochs),
            "speedup.png": plots.plot_speedup(summary),
            "test_acc_vs_lr.png": plots.plot_test_acc_vs_lr(summary),
            "test_acc_vs_time.png": plots.plot_test_acc_vs_time(summary, evaluations, 0.8)}


def _legends(figure) -> list[list[str]]:
    legends = [*figure.legends, *(axes.get_legend() for axes in figure.axes)]
    return [[text.get_text() for text in legend.get_texts()] for legend in legends if legend]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.pyplot().close("all")


def test_every_legend_of_a_24_trial_sweep_names_at_most_8_values():
    summary, epochs, evaluations = _sweep()
    assert len(summary) == 24
    for name, figure in _figures(summary, epochs, evaluations).items():
        legends = _legends(figure)
        assert legends, name
        for entries in legends:
            assert len(entries) <= plots.LEGEND_MAX_ENTRIES, (name, entries)


def test_accuracy_curves_are_a_panel_per_worker_count_coloured_by_lr():
    summary, epochs, evaluations = _sweep()
    for figure in (plots.plot_test_acc_by_epoch(summary, epochs),
                   plots.plot_test_acc_vs_time(summary, evaluations, 0.8)):
        assert [axes.get_title() for axes in figure.axes] == [
            "1 worker", "2 workers", "4 workers"]
        # 8 trials per panel: 4 lrs x 2 batches (and the target line).
        assert [len(axes.get_lines()) for axes in figure.axes] in ([8] * 3, [9] * 3)
        (legend,) = _legends(figure)
        assert legend[:6] == ["lr=0.05", "lr=0.1", "lr=0.2", "lr=0.4", "b=128",
                              "b=256"]


def test_speedup_is_a_line_per_batch_with_the_spread_over_lr():
    summary, _, _ = _sweep()
    (axes,) = plots.plot_speedup(summary).axes
    *lines, ideal = axes.get_lines()
    assert ideal.get_label() == "ideal (linear)"
    assert len(lines) == len(BATCHES)  # not one per lr
    assert [list(line.get_xdata()) for line in lines] == [list(WORKERS)] * 2
    measured = summary.groupby(["batch_size", "num_workers"])["speedup"]
    for line, batch in zip(lines, BATCHES):
        assert list(line.get_ydata()) == pytest.approx(list(measured.median()[batch]))
    # A band per line: its lowest point at 4 workers is the slowest lr's speedup.
    assert len(axes.collections) == len(BATCHES)
    assert axes.collections[0].get_paths()[0].vertices[:, 1].min() == pytest.approx(
        measured.min()[128].min())
    assert _legends(axes.figure) == [["b=128", "b=256", "ideal (linear)"]]


def test_swept_strategies_are_rows_of_panels_and_colours_of_the_speedup():
    summary, epochs, _ = _sweep(syncs=("scratch", "ddp", "ring"))
    assert len(summary) == 72
    figure = plots.plot_test_acc_by_epoch(summary, epochs)
    assert len(figure.axes) == 9
    assert figure.axes[0].get_title() == "ddp, 1 worker"
    speedup = plots.plot_speedup(summary)
    assert len(speedup.axes[0].get_lines()) == 3 * len(BATCHES) + 1
    assert _legends(speedup) == [["ddp", "ring", "scratch", "b=128", "b=256",
                                  "ideal (linear)"]]


def test_many_lrs_keep_the_legend_short():
    summary, epochs, _ = _sweep(workers=(1, 2), batches=(256,),
                                lrs=tuple(0.01 * 2 ** power for power in range(12)))
    (legend,) = _legends(plots.plot_test_acc_by_epoch(summary, epochs))
    assert legend == ["lr=0.01", "... 10 more ...", "lr=20.48"]


def test_the_quickstarts_two_trials_still_draw_their_lines(tmp_path):
    summary, epochs, evaluations = _sweep(workers=(1, 2), batches=(256,), lrs=(0.2,))
    figures = _figures(summary, epochs, evaluations)
    by_epoch = figures["test_acc_by_epoch.png"]
    assert [len(axes.get_lines()) for axes in by_epoch.axes] == [1, 1]
    assert list(by_epoch.axes[1].get_lines()[0].get_ydata()) == list(
        epochs[epochs["trial_id"] == "t1"]["test_acc"])
    # One batch and one lr: the title names them, no legend entry does.
    assert "all trials: lenet b=256 global batch lr=0.2" in by_epoch.get_suptitle()
    assert _legends(by_epoch) == []
    (speedup,) = figures["speedup.png"].axes
    assert [list(line.get_ydata()) for line in speedup.get_lines()] == [
        pytest.approx([1.0, 2 ** 0.8 * 1.05]), [1, 2]]
    (vs_lr,) = figures["test_acc_vs_lr.png"].axes
    assert len(vs_lr.get_lines()) == 2
    paths = {name: tmp_path / name for name in plots.PLOT_FILES}
    plots.plot_all(summary, epochs, evaluations, 0.8, paths)
    assert all(path.stat().st_size > 10_000 for path in paths.values())
