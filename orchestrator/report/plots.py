"""The sweep's PNG plots: accuracy per epoch, speedup, accuracy against lr and
against training time, and the trials over wall time per node. Each `plot_*`
returns its Figure; `plot_all` saves them.

A sweep of 24 trials stays readable: lines are grouped by what changes them,
colours and line styles stand for the values of an axis (their legend lists
those values, never the trials), and accuracy curves are small multiples, one
panel per worker count and swept setup.
"""

from pathlib import Path

import pandas as pd

from orchestrator.records import counted, write_atomically
from orchestrator.report import timeline
from orchestrator.report.scaling_model import PREDICTED_WORKERS, ScalingResult
from orchestrator.report.summary import SCALING_GROUP, SPEEDUP_AXES

PLOT_FILES = ("test_acc_by_epoch.png", "speedup.png", "test_acc_vs_lr.png",
              "test_acc_vs_time.png", "timeline.png")
LEGEND_MAX_ENTRIES = 8
# What a trial runs beside its workers, batch and lr: one row of panels each.
SETUP_AXES = ["model", *SPEEDUP_AXES, "threads_per_worker", "straggler_slowdown"]
BATCH_AXES = ["batch_size", "batch_scaling"]
assert set(SCALING_GROUP) == {*SETUP_AXES, *BATCH_AXES, "base_lr"}
_FORMATS = {"num_workers": lambda value: counted(value, "worker"), "batch_size": "b={}".format,
            "batch_scaling": "{} batch".format, "base_lr": "lr={:g}".format,
            "momentum": "m={:g}".format,
            "threads_per_worker": lambda value: counted(value, "thread"),
            "straggler_slowdown": "straggler x{:g}".format}
_LINESTYLES = ["-", "--", ":", "-."]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def pyplot():
    """matplotlib's pyplot, drawing to files; imported only here, where a plot is
    made: it is slow to import."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def save_png(figure, path: Path) -> None:
    """Write `figure` to `path` atomically and free it."""
    if figure.get_layout_engine() is None:
        figure.tight_layout()
    write_atomically(path, lambda target: figure.savefig(target, dpi=120, format="png"))
    pyplot().close(figure)


def plot_all(summary: pd.DataFrame, epochs: pd.DataFrame, evaluations: pd.DataFrame,
             target_acc: float | None, paths: dict[str, Path]) -> None:
    figures = {"test_acc_by_epoch.png": plot_test_acc_by_epoch(summary, epochs),
               "speedup.png": plot_speedup(summary),
               "test_acc_vs_lr.png": plot_test_acc_vs_lr(summary),
               "test_acc_vs_time.png": plot_test_acc_vs_time(summary, evaluations, target_acc),
               "timeline.png": plot_timeline(summary, epochs)}
    for name, figure in figures.items():
        save_png(figure, paths[name])


def plot_test_acc_by_epoch(summary: pd.DataFrame, epochs: pd.DataFrame):
    """The book's animator for every trial: a panel per worker count and setup,
    colour by lr, line style by batch."""
    return _accuracy_curves(summary, epochs, "epoch", "epoch",
                            "Test accuracy per epoch (the book's animator)", None)


def plot_test_acc_vs_time(summary: pd.DataFrame, evaluations: pd.DataFrame,
                          target_acc: float | None):
    """Every trial's test accuracy against its training seconds, the target as a line."""
    return _accuracy_curves(summary, evaluations, "train_s",
                            "training seconds (evaluation excluded)",
                            "Test accuracy against training time", target_acc)


def plot_speedup(summary: pd.DataFrame):
    """Speedup against workers, a line per setup and batch: the median over the
    trials that differ only in lr (which leaves throughput alone), their
    minimum to maximum as a band."""
    measured = summary.dropna(subset=["speedup"])
    # A line per transport too (one strategy over shared memory and over gloo is not
    # the same work); the 1-worker trials, which sum nothing, start every line.
    line_axes = [*SETUP_AXES, "transport"] if "transport" in summary else SETUP_AXES
    ones, many = (measured[measured["num_workers"] == 1], measured[measured["num_workers"] > 1])
    setups = _varied(many, line_axes) if not many.empty else _varied(summary, SETUP_AXES)
    style = _Style(many if not many.empty else summary, setups or BATCH_AXES, BATCH_AXES)
    figure, axes = pyplot().subplots(figsize=(7.5, 4.5), layout="constrained")
    for key, group in (many if not many.empty else measured).groupby([*line_axes, *BATCH_AXES]):
        values = dict(zip([*line_axes, *BATCH_AXES], key))
        start = ones[(ones[[*SETUP_AXES, *BATCH_AXES]] == pd.Series(
            {axis: values[axis] for axis in [*SETUP_AXES, *BATCH_AXES]})).all(axis=1)]
        group = pd.concat([start, group]) if not many.empty else group
        spread = group.groupby("num_workers")["speedup"].agg(["median", "min", "max"])
        line, = axes.plot(spread.index, spread["median"], **style.of(values))
        axes.fill_between(spread.index, spread["min"], spread["max"], color=line.get_color(),
                          alpha=0.2, linewidth=0)
    max_workers = int(summary["num_workers"].max())
    axes.plot([1, max_workers], [1, max_workers], "k--", label="ideal (linear)")
    axes.set(xlabel="workers", ylabel="speedup (throughput)")
    axes.set_xticks(sorted(summary["num_workers"].unique()))
    axes.grid(alpha=0.3)
    lrs = summary["base_lr"].nunique()
    spread_note = f" (median over {lrs} lrs, band: min to max)" if lrs > 1 else ""
    axes.legend(handles=[*style.handles(), *axes.get_lines()[-1:]], fontsize="small")
    _suptitle(figure, summary, [*BATCH_AXES, "model", "base_lr"],
              f"Speedup against 1 worker{spread_note}")
    return figure


def plot_test_acc_vs_lr(summary: pd.DataFrame):
    """Final test accuracy against the lr trained at: a line per worker count, batch,
    epochs and warm-up (accuracies after 2 epochs, or after a warm-up, are not points
    of one curve with 8 epochs without), each point the mean over its seeds; a panel
    per setup."""
    style = _Style(summary, ["num_workers"], BATCH_AXES)
    figure, panels = _panels(summary, columns=None)
    curve_axes = ["num_workers", *BATCH_AXES, *SETUP_AXES,
                  *[axis for axis in ("num_epochs", "warmup_epochs") if axis in summary]]
    for key, group in summary.groupby(curve_axes):
        values = dict(zip(curve_axes, key))
        points = group.groupby("lr")["final_test_acc"].mean()
        panels[_setup_key(summary, values), None].plot(points.index, points.values,
                                                       **style.of(values))
    lrs = sorted(summary["lr"].unique())
    for axes in panels.values():
        axes.set(xscale="log", xlabel="learning rate", ylabel="final test acc")
        # The lrs searched as ticks: log-scale minor labels overlap.
        axes.set_xticks(lrs, labels=[f"{lr:g}" for lr in lrs])
        axes.minorticks_off()
    _finish(figure, panels, style, summary, "Test accuracy against learning rate")
    return figure


def plot_timeline(summary: pd.DataFrame, epochs: pd.DataFrame):
    """Each trial as a bar over the sweep's wall time, on a row per node it ran on
    (a restarted worker group is a bar of its own), coloured by its workers."""
    spans = timeline.trial_spans(epochs)
    workers = summary.set_index("trial_id")["num_workers"]
    nodes = sorted(spans["node"].unique())
    figure, axes = pyplot().subplots(figsize=(9, 1.5 + 0.45 * max(1, len(nodes))),
                                     layout="constrained")
    if spans.empty:
        axes.text(0.5, 0.5, "no start and end times recorded", ha="center", va="center",
                  transform=axes.transAxes)
        axes.set_axis_off()
        return figure
    style = _Style(summary, ["num_workers"], ["num_workers"])
    origin = spans["start_unix_s"].min()
    for span in spans.itertuples():
        start_s, length_s = span.start_unix_s - origin, span.end_unix_s - span.start_unix_s
        color = style.of({"num_workers": workers.get(span.trial_id, 1)})["color"]
        axes.barh(nodes.index(span.node), length_s, left=start_s, height=0.6, color=color,
                  edgecolor="k", linewidth=0.5)
        # The trial id's own part: Tune's ids share the experiment's prefix.
        axes.text(start_s + length_s / 2, nodes.index(span.node), span.trial_id.rsplit("_", 1)[-1],
                  ha="center", va="center", fontsize="x-small")
    axes.set_yticks(range(len(nodes)), labels=[node[:12] for node in nodes])
    axes.set(xlabel="wall seconds since the first trial started", ylabel="node")
    axes.invert_yaxis()
    axes.grid(axis="x", alpha=0.3)
    handles = style.handles()
    if handles:
        axes.legend(handles=handles, fontsize="small", loc="lower right")
    at_once = timeline.max_trials_at_once(spans)
    _suptitle(figure, summary, ["num_workers"],
              f"Trials over wall time, a row per node (at most {at_once} at once)")
    return figure


def _accuracy_curves(summary, curves, x_column, x_label, title, target_acc):
    style = _Style(summary, ["base_lr"], BATCH_AXES)
    figure, panels = _panels(summary, columns="num_workers")
    for row in summary.to_dict("records"):
        trial = curves[curves["trial_id"] == row["trial_id"]].sort_values("epoch")
        panel = panels[_setup_key(summary, row), row["num_workers"]]
        panel.plot(trial[x_column], trial["test_acc"], **style.of(row))
    for axes in panels.values():
        axes.set(xlabel=x_label, ylabel="test acc")
        if x_column == "epoch":
            axes.xaxis.get_major_locator().set_params(integer=True)
        if target_acc is not None:
            axes.axhline(target_acc, color="k", linestyle="--", linewidth=1)
    extra = []
    if target_acc is not None:
        extra = [_handle(color="k", linestyle="--", label=f"target {target_acc:g}")]
    _finish(figure, panels, style, summary, title, extra)
    return figure


class _Style:
    """A colour per value of some axes, a line style and marker per value of
    others, and the legend of those values (an axis with one value is left out
    of the legend: the figure's title names it)."""

    def __init__(self, summary: pd.DataFrame, color_axes: list[str], style_axes: list[str]):
        plt = pyplot()
        self.color_axes, self.style_axes = color_axes, style_axes
        # Labels name only the axes whose value changes.
        self.shown = set(_varied(summary, [*color_axes, *style_axes]))
        self.color_keys = _distinct(summary, color_axes)
        self.style_keys = _distinct(summary, style_axes)
        ordered = all(pd.api.types.is_numeric_dtype(summary[axis]) for axis in color_axes)
        # An ordered axis (lr, workers) in a sequential map; its light end is left
        # out, it hardly shows on white.
        colormap = plt.get_cmap("viridis" if ordered else "tab10")
        self.colors = [colormap(index / max(1, len(self.color_keys) - 1) * 0.85 if ordered
                                else index % 10) for index in range(len(self.color_keys))]

    def of(self, values: dict) -> dict:
        color = self.color_keys.index(tuple(values[axis] for axis in self.color_axes))
        style = self.style_keys.index(tuple(values[axis] for axis in self.style_axes))
        return {"color": self.colors[color], **self._line(style)}

    def handles(self) -> list:
        """The legend: a colour entry per colour value, a line entry per style
        value; an axis with one value has none."""
        def named(axes, key):
            return _label(dict(zip(axes, key)), [axis for axis in axes if axis in self.shown])
        if self.color_axes == self.style_axes:
            # One entry per value, with both its colour and its line.
            return [_handle(label=named(self.style_axes, key), color=color, **self._line(index))
                    for index, (key, color) in enumerate(zip(self.style_keys, self.colors))
                    ] if len(self.style_keys) > 1 else []
        styles = [_handle(color="0.4", label=named(self.style_axes, key), **self._line(index))
                  for index, key in enumerate(self.style_keys)] if len(self.style_keys) > 1 else []
        colors = [_handle(color=color, label=named(self.color_axes, key))
                  for key, color in zip(self.color_keys, self.colors)]
        if len(colors) == 1:
            colors = []
        elif len(colors) > LEGEND_MAX_ENTRIES - len(styles) - 1:
            # The colours are in order: the two ends and a count of those between.
            colors = [colors[0], _handle(color="none", label=f"... {len(colors) - 2} more ..."),
                      colors[-1]]
        return [*colors, *styles]

    @staticmethod
    def _line(index: int) -> dict:
        return {"linestyle": _LINESTYLES[index % len(_LINESTYLES)],
                "marker": _MARKERS[index % len(_MARKERS)], "markersize": 4}


def _panels(summary: pd.DataFrame, columns: str | None):
    """A grid of axes sharing x and y: a row per swept setup, a column per value of
    `columns`; keyed by (setup key, column value)."""
    rows = _distinct(summary, _varied(summary, SETUP_AXES))
    values = sorted(summary[columns].unique()) if columns else [None]
    figure, grid = pyplot().subplots(len(rows), len(values), squeeze=False, sharex=True,
                                     sharey=True, layout="constrained",
                                     figsize=(min(16, 2.5 + 3.6 * len(values)),
                                              1.2 + 3.0 * len(rows)))
    setups = _varied(summary, SETUP_AXES)
    panels = {}
    for row, setup in enumerate(rows):
        for column, value in enumerate(values):
            axes = grid[row][column]
            title = [_label(dict(zip(setups, setup)), setups)]
            if columns:
                title.append(_label({columns: value}, [columns]))
            axes.set_title(", ".join(part for part in title if part), fontsize="medium")
            axes.grid(alpha=0.3)
            panels[setup, value] = axes
    return figure, panels


def _finish(figure, panels: dict, style: _Style, summary, title: str, extra=()) -> None:
    for axes in panels.values():
        axes.label_outer()
    handles = [*style.handles(), *extra]
    if handles:
        # One legend for the figure, beside the panels: it names values, not trials.
        figure.legend(handles=handles, fontsize="small", loc="outside right center")
    _suptitle(figure, summary, [*style.color_axes, *style.style_axes, "model"], title)


def _suptitle(figure, summary: pd.DataFrame, axes: list[str], title: str) -> None:
    """The title, and the values every trial shares (no legend entry names them)."""
    constant = [axis for axis in ["num_workers", *SETUP_AXES, *BATCH_AXES, "base_lr"]
                if axis in axes and summary[axis].nunique() == 1]
    shared = _label(summary.iloc[0].to_dict(), constant) if len(summary) else ""
    figure.suptitle(" - ".join(part for part in (title, f"all trials: {shared}" if shared else "")
                               if part), fontsize="medium")


def _setup_key(summary: pd.DataFrame, values: dict) -> tuple:
    return tuple(values[axis] for axis in _varied(summary, SETUP_AXES))


def _varied(summary: pd.DataFrame, axes: list[str]) -> list[str]:
    return [axis for axis in axes if summary[axis].nunique() > 1]


def _distinct(summary: pd.DataFrame, axes: list[str]) -> list[tuple]:
    return sorted({tuple(row) for row in summary[axes].itertuples(index=False)}) if axes else [()]


def _label(values: dict, axes: list[str]) -> str:
    return " ".join(_FORMATS.get(axis, str)(values[axis]) for axis in axes)


def _handle(**style):
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def plot_scaling_model(axes, result: ScalingResult) -> None:
    """Speedup against workers: measured points, model curves, the ideal line.

    Curves: every sync on a measured link; on a named interconnect, one sync
    (bucketed if predicted) to keep the plot readable.
    """
    axes.plot(PREDICTED_WORKERS, PREDICTED_WORKERS, "k--", linewidth=1, label="ideal")
    predictions = result.predictions
    syncs = list(predictions["sync"].unique())
    shown_sync = "bucketed" if "bucketed" in syncs else syncs[0]
    several_models = predictions["model"].nunique() > 1
    global_batch = predictions[predictions["batch_scaling"] == "global"]
    for (link, model, sync), curve in global_batch.groupby(["link", "model", "sync"], sort=False):
        if not link.endswith("(measured)") and sync != shown_sync:
            continue
        label = f"{link}, {sync}" + (f", {model}" if several_models else "")
        axes.plot(curve["num_workers"], curve["speedup"], linewidth=1, label=label)
    markers = dict(zip(("scratch", "bucketed", "ddp", "sharded", "root", "delayed"), "osD^vP"))
    for sync, points in result.validation.groupby("sync"):
        axes.scatter(points["num_workers"], points["measured_speedup"], zorder=3,
                     marker=markers.get(sync, "x"), color="black", label=f"measured, {sync}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(PREDICTED_WORKERS, [str(k) for k in PREDICTED_WORKERS])
    axes.set_xlabel("workers (global batch fixed)")
    axes.set_ylabel("speedup over 1 worker")
    axes.set_title("Scaling model: measured points and predictions")
    axes.legend(fontsize="xx-small")
