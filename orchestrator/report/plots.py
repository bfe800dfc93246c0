"""The sweep's PNG plots: accuracy per epoch, speedup, accuracy against lr and
against training time."""

from pathlib import Path

import pandas as pd

from orchestrator.records import write_atomically
from orchestrator.report import time_to_accuracy
from orchestrator.report.summary import SCALING_GROUP, SPEEDUP_AXES

PLOT_FILES = ("test_acc_by_epoch.png", "speedup.png", "test_acc_vs_lr.png",
              "test_acc_vs_time.png")


def pyplot():
    """matplotlib's pyplot, drawing to files; imported only here, where a plot is
    made: it is slow to import."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def save_png(figure, path: Path) -> None:
    """Write `figure` to `path` atomically and free it."""
    figure.tight_layout()
    write_atomically(path, lambda target: figure.savefig(target, dpi=120, format="png"))
    pyplot().close(figure)


def plot_all(summary: pd.DataFrame, epochs: pd.DataFrame, evaluations: pd.DataFrame,
              target_acc: float | None, paths: dict[str, Path]) -> None:
    plt = pyplot()

    def save(figure, name: str) -> None:
        save_png(figure, paths[name])

    # Labels name the run axes the sweep varied.
    varied = [axis for axis in SPEEDUP_AXES if summary[axis].nunique() > 1]

    def run_label(values) -> str:
        return "".join(f" m={values[axis]:g}" if axis == "momentum" else f" {values[axis]}"
                       for axis in varied)

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for row in summary.itertuples():
        history = epochs[epochs["trial_id"] == row.trial_id].sort_values("epoch")
        axes.plot(history["epoch"], history["test_acc"], marker="o",
                  label=f"{row.num_workers}w b={row.batch_size} lr={row.lr:g}"
                        + run_label(row._asdict()))
    axes.set(xlabel="epoch", ylabel="test acc", title="Test accuracy per epoch (the book's animator)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    save(figure, "test_acc_by_epoch.png")

    figure, axes = plt.subplots(figsize=(6, 4.5))
    measured = summary.dropna(subset=["speedup"])
    for key, group in measured.groupby(SCALING_GROUP):
        values = dict(zip(SCALING_GROUP, key))
        group = group.sort_values("num_workers")
        axes.plot(group["num_workers"], group["speedup"], marker="o",
                  label=f"b={values['batch_size']} ({values['batch_scaling']}) "
                        f"lr={values['base_lr']:g}" + run_label(values))
    max_workers = int(summary["num_workers"].max())
    axes.plot([1, max_workers], [1, max_workers], "k--", label="ideal (linear)")
    axes.set(xlabel="workers", ylabel="speedup (throughput)", title="Speedup against 1 worker")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    save(figure, "speedup.png")

    figure, axes = plt.subplots(figsize=(6, 4.5))
    for key, group in summary.groupby(["num_workers", "batch_size", *varied]):
        values = dict(zip(["num_workers", "batch_size", *varied], key))
        group = group.sort_values("base_lr")
        axes.plot(group["base_lr"], group["final_test_acc"], marker="o",
                  label=f"{values['num_workers']} workers, b={values['batch_size']}"
                        + run_label(values))
    axes.set(xscale="log", xlabel="base learning rate", ylabel="final test acc",
             title="Test accuracy against learning rate")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    save(figure, "test_acc_vs_lr.png")

    figure, axes = plt.subplots(figsize=(9.5, 4.5))
    time_to_accuracy.plot_test_acc_vs_time(axes, summary, evaluations, target_acc)
    save(figure, "test_acc_vs_time.png")
