"""Aggregate a sweep's trials into tables, files and plots.

Input: one row per (trial, epoch) and one per (trial, evaluation) as reported
by the workers, and one row per trial with its grid values and how it ended.
Output: `trials.csv`, `epochs.csv`, `evaluations.csv`, `report.md` and four
PNG plots, each written atomically.
"""

import json
import math
from pathlib import Path

import pandas as pd

from orchestrator.report import time_to_accuracy
from orchestrator.records import book_line, write_atomically

FINISHED, STOPPED_EARLY, DIVERGED, FAILED = "finished", "stopped early", "diverged", "failed"
REACHED_TARGET = "reached target"  # ended by --stop-at-target
INTERRUPTED = "interrupted"  # the sweep stopped before this trial ended: --resume finishes it

# A speedup compares trials of one momentum, strategy, split and precision.
SPEEDUP_AXES = ["momentum", "sync", "split", "precision"]
# Trials that share these differ only in the number of workers: the 1-worker
# one is the baseline of the others' speedup. `batch_size` is the grid's b,
# global or per worker as `batch_scaling` says.
SCALING_GROUP = ["model", *SPEEDUP_AXES, "threads_per_worker", "straggler_slowdown",
                 "batch_scaling", "batch_size", "base_lr"]
# The tuning playbook's method: within each cell of the studied parameters,
# the learning rate is the nuisance parameter to optimise over.
ISOLATION_CELL = ["model", *SPEEDUP_AXES, "batch_scaling", "num_workers", "batch_size"]
STRATEGY_CELL = ["model", *SPEEDUP_AXES, "num_workers"]

PLOT_FILES = ("test_acc_by_epoch.png", "speedup.png", "test_acc_vs_lr.png",
              "test_acc_vs_time.png")


def summarize_trials(trials: pd.DataFrame, epochs: pd.DataFrame, evaluations: pd.DataFrame,
                     target_acc: float | None = None) -> pd.DataFrame:
    """One row per trial: its grid values, derived values, outcome, speed and time
    to `target_acc`.

    `trials` holds the grid values and derived values of each trial, its
    `error` (empty if none), `early_stopping` (whether a scheduler may have
    stopped it) and `stop_at_target`; `epochs` and `evaluations` hold what the
    workers reported.
    """
    per_trial = epochs.sort_values("epoch").groupby("trial_id").agg(
        epochs_run=("epoch", "max"),
        final_test_acc=("test_acc", "last"),
        best_test_acc=("test_acc", "max"),
        final_train_loss=("train_loss", "last"),
        mean_epoch_time_s=("epoch_time_s", "mean"),
        mean_eval_time_s=("eval_time_s", "mean"),
        # The median ignores a first epoch slowed by warm-up effects.
        samples_per_s=("samples_per_s", "median"),
        total_sync_time_s=("sync_time_s", "sum"),
        total_epoch_time_s=("epoch_time_s", "sum"),
        last_status=("status", "last"),
    )
    per_trial["sync_share"] = per_trial.pop("total_sync_time_s") / per_trial.pop("total_epoch_time_s")
    summary = trials.merge(per_trial, left_on="trial_id", right_index=True, how="left").merge(
        time_to_accuracy.target_columns(evaluations, target_acc), left_on="trial_id",
        right_index=True, how="left")
    summary["epochs_run"] = summary["epochs_run"].fillna(0).astype(int)
    summary["status"] = [_status(row) for row in summary.itertuples()]
    return _with_speedup(summary).sort_values(
        [*SCALING_GROUP, "num_workers"]).reset_index(drop=True)


def scaling_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Workers against time per epoch, throughput, speedup and efficiency."""
    columns = [*SCALING_GROUP, "num_workers", "global_batch_size", "mean_epoch_time_s",
               "samples_per_s", "sync_share", "speedup", "efficiency"]
    return summary[summary["status"] != FAILED][columns].reset_index(drop=True)


def strategy_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, split, precision and worker count: seconds per epoch, sync share
    and speedup, each the median over that cell's trials (other batches and lrs)."""
    usable = summary[summary["status"] != FAILED]
    if usable.empty:
        return pd.DataFrame()
    table = usable.groupby(STRATEGY_CELL, sort=True).agg(
        trials=("trial_id", "count"), mean_epoch_time_s=("mean_epoch_time_s", "median"),
        sync_share=("sync_share", "median"), speedup=("speedup", "median"))
    return table.reset_index()


def split_table(summary: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """For each trial of several workers: each worker's share of the global batch
    and its forward+backward seconds, in the first and the last epoch (a
    proportional split starts even and re-sets the shares from the first)."""
    rows = []
    for row in summary[summary["num_workers"] > 1].itertuples():
        history = epochs[epochs["trial_id"] == row.trial_id].sort_values("epoch")
        if history.empty or "worker_shares" not in history:
            continue
        first, last = history.iloc[0], history.iloc[-1]
        rows.append({"trial_id": row.trial_id, "sync": row.sync, "split": row.split,
                     "num_workers": row.num_workers,
                     "first_epoch_shares": per_worker_text(first["worker_shares"], "g"),
                     "first_epoch_compute_s": per_worker_text(first["worker_compute_s"], ".2f"),
                     "last_epoch": int(last["epoch"]),
                     "last_epoch_shares": per_worker_text(last["worker_shares"], "g"),
                     "last_epoch_compute_s": per_worker_text(last["worker_compute_s"], ".2f")})
    return pd.DataFrame(rows)


def isolation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """For each (workers, batch) cell, the best learning rate and whether it
    sits on the edge of the range searched (then the range was too narrow)."""
    rows = []
    for cell, group in summary.groupby(ISOLATION_CELL, sort=True):
        searched = sorted(group["base_lr"].unique())
        usable = group[group["status"].isin([FINISHED, STOPPED_EARLY, REACHED_TARGET])].dropna(
            subset=["final_test_acc"])
        row = dict(zip(ISOLATION_CELL, cell))
        row["lrs_searched"] = " ".join(f"{lr:g}" for lr in searched)
        if usable.empty:
            row.update(best_base_lr=math.nan, best_lr=math.nan, best_final_test_acc=math.nan,
                       on_edge="no usable trial")
        else:
            best = usable.loc[usable["final_test_acc"].idxmax()]
            row.update(best_base_lr=best["base_lr"], best_lr=best["lr"],
                       best_final_test_acc=best["final_test_acc"],
                       on_edge=_edge_flag(best["base_lr"], searched))
        rows.append(row)
    return pd.DataFrame(rows)


def write_results(out_dir: Path, summary: pd.DataFrame, epochs: pd.DataFrame,
                  evaluations: pd.DataFrame, *, title_lines: list[str],
                  target_acc: float | None = None, sections: tuple[str, ...] = ()
                  ) -> dict[str, Path]:
    """Write every result file into `out_dir`; returns their paths by name.

    `summary` is what `summarize_trials` made of the trials, `epochs` and
    `evaluations` for `target_acc`; `sections` (markdown) end the report.
    """
    paths = {name: out_dir / name for name in ("trials.csv", "epochs.csv", "evaluations.csv",
                                               "report.md", *PLOT_FILES)}
    write_atomically(paths["trials.csv"], lambda path: summary.to_csv(path, index=False))
    write_atomically(paths["epochs.csv"], lambda path: epochs.to_csv(path, index=False))
    write_atomically(paths["evaluations.csv"], lambda path: evaluations.to_csv(path, index=False))
    report = render_report(summary, epochs, title_lines=title_lines, target_acc=target_acc,
                           sections=sections)
    write_atomically(paths["report.md"], lambda path: path.write_text(report))
    _plot_all(summary, epochs, evaluations, target_acc, paths)
    return paths


def render_report(summary: pd.DataFrame, epochs: pd.DataFrame, *, title_lines: list[str],
                  target_acc: float | None = None, sections: tuple[str, ...] = ()) -> str:
    lines = ["# Sweep report", "", *title_lines, "", "## Trials", "",
             "The book's line for each trial (time per epoch is training only).", ""]
    for row in summary.itertuples():
        history = epochs[epochs["trial_id"] == row.trial_id].sort_values("epoch")
        label = (f"`{row.trial_id}` {row.num_workers} worker(s), batch {row.batch_size} "
                 f"({row.batch_scaling}), lr {row.lr:g}, sync {row.sync}, split {row.split}, "
                 f"{row.precision}")
        outcome = (book_line(history.to_dict("records")) if len(history)
                   else f"no epoch finished: {row.error}")
        lines.append(f"- {label}: {outcome} [{row.status}]")
    lines += ["", "## Scaling", "",
              "Speedup is throughput (samples/s) against the 1-worker trial with the same "
              "model, sync, split, precision, batch and lr; efficiency is speedup / workers.", "",
              markdown_table(scaling_table(summary)), "",
              "## Strategies", "",
              "Per sync strategy, split, precision and worker count: seconds per epoch, the "
              "share of it spent in gradient sync, and the speedup, each the median over the "
              "cell's trials.", "",
              markdown_table(strategy_table(summary)), "",
              "## Split per worker", "",
              "Each worker's examples per step (its share of the global batch) and its seconds "
              "of forward and backward, per rank, in a trial's first and last epoch; a "
              "worker that computes much less than another waits for it at every step. "
              "`epochs.csv` has every epoch.", "",
              markdown_table(split_table(summary, epochs)), "",
              "## Learning rate per (workers, batch)", "",
              "The best base lr of each cell by final test accuracy; `on_edge` flags a best "
              "value at the end of the range searched, where a wider range may do better.", "",
              markdown_table(isolation_table(summary)), ""]
    if target_acc is not None:
        lines += ["## Time to accuracy", "",
                  f"Target: test accuracy {target_acc:g}. Training seconds exclude evaluation; "
                  f"wall seconds count from the trial's start (worker start-up, evaluations and "
                  f"checkpoints included). The trials that reached it, fastest first:", "",
                  markdown_table(time_to_accuracy.ranking(summary)), "",
                  time_to_accuracy.baseline_line(summary, target_acc), "",
                  f"**Recommended:** {time_to_accuracy.recommendation(summary, target_acc)}", ""]
    lines += [*sections, "## Files", "", *[f"- `{name}`" for name in
                                ("trials.csv", "epochs.csv", "evaluations.csv", *PLOT_FILES)], ""]
    return "\n".join(lines)


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(no rows)"

    def cell(value) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return ""
            return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(cell(value) for value in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def per_worker_values(values) -> list | None:
    """A per-worker list (shares, compute seconds); epochs.csv read back holds it as
    text, "[170, 86]"; None for a trial run before these were recorded."""
    if isinstance(values, (list, tuple)):
        return list(values)
    if isinstance(values, str) and values.startswith("["):
        return json.loads(values)
    return None


def per_worker_text(values, spec: str) -> str:
    """A per-worker list as `a / b`, each value formatted by `spec`; empty for a
    trial run before these were recorded."""
    return " / ".join(format(value, spec) for value in per_worker_values(values) or ())


def _status(row) -> str:
    if isinstance(row.error, str) and row.error:
        return FAILED
    if row.stop_at_target and not math.isnan(row.train_s_to_target):
        return REACHED_TARGET
    if row.last_status == DIVERGED:
        return DIVERGED
    if row.epochs_run < row.num_epochs:
        return STOPPED_EARLY if row.early_stopping else INTERRUPTED
    return FINISHED


def _with_speedup(summary: pd.DataFrame) -> pd.DataFrame:
    baselines = (summary[(summary["num_workers"] == 1) & (summary["status"] != FAILED)]
                 .set_index(SCALING_GROUP)["samples_per_s"])
    keys = pd.MultiIndex.from_frame(summary[SCALING_GROUP])
    summary = summary.copy()
    summary["speedup"] = summary["samples_per_s"].to_numpy() / baselines.reindex(keys).to_numpy()
    summary["efficiency"] = summary["speedup"] / summary["num_workers"]
    return summary


def _edge_flag(best: float, searched: list[float]) -> str:
    if len(searched) == 1:
        return "only one lr searched"
    if best == searched[0]:
        return "yes (lowest)"
    if best == searched[-1]:
        return "yes (highest)"
    return "no"


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


def _plot_all(summary: pd.DataFrame, epochs: pd.DataFrame, evaluations: pd.DataFrame,
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
