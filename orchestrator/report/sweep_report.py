"""The one call the driver makes: a finished (or interrupted) sweep's frames in,
every file of its folder out (trials.csv, epochs.csv, evaluations.csv,
report.md, the plots, the answer sheet and `--profile-steps`' profile.csv), and
the tables to print.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator.records import (LeftOut, Status, book_line, counted, memory_format_text,
                                  memory_text, seconds_text, step_graph_text, write_atomically)
from orchestrator.report import profile, time_to_accuracy, timeline
from orchestrator.report.answers import sheet as answer_sheet
from orchestrator.report.plots import PLOT_FILES, plot_all
from orchestrator.report.what_if import what_if
from orchestrator.report.summary import STRATEGY_CELL, summarize_trials
from orchestrator.report.tables import (ISOLATION_KEYS, SCALING_KEYS, SPLIT_KEYS, isolation_table,
                                        markdown_table, scaling_table, split_table,
                                        strategy_table, varying_table)


@dataclass(frozen=True)
class SweepReport:
    tables: str
    """The scaling, strategy and learning-rate tables (and time to accuracy, and
    where the time went), as printed."""
    paths: dict[str, Path]
    failed_trials: dict[str, str]
    """Each failed trial's error (trials.csv's error column), by trial id."""
    interrupted_trials: list[str]
    """Trials that did not end: the same command with --resume finishes them."""


def write_sweep_report(out_dir: Path, trials: pd.DataFrame, epochs: pd.DataFrame,
                       evaluations: pd.DataFrame, calibration: dict | None, *,
                       title_lines: list[str], target_acc: float | None, data_note: str,
                       use_gpu: bool, left_out: Sequence[LeftOut] = (),
                       sessions: Sequence[dict] = (), not_ended: int = 0,
                       profiled: pd.DataFrame | None = None) -> SweepReport:
    """Summarise the sweep's frames (tune_results.collect) and write every file.

    `calibration` is calibration.json's content (None: no scaling model);
    `data_note` names the data subsets, empty on full data; `left_out`: the
    preset's points the cluster could not hold; `sessions`: sessions.json's, for
    where the wall time went; `not_ended`: the trials Tune did not end (not
    started, or stopped), for the line that says the sweep was interrupted;
    `profiled`: `--profile-steps`' rows (report/profile.py), written to profile.csv."""
    summary = summarize_trials(trials, epochs, evaluations, target_acc)
    # A trial Tune stopped at a Ctrl-C may come back ended; its epochs say it is not.
    not_ended = max(not_ended, len(_trials_with(summary, Status.INTERRUPTED)))
    if not_ended:
        title_lines = [*title_lines, (
            f"- **interrupted**: {not_ended} of the sweep's trials did not end (not started, "
            f"or stopped before their last epoch); the command with `--resume` (`--out "
            f"{out_dir}`, the cluster's options as they were) runs them and rewrites this "
            f"report")]
    sheet = answer_sheet.build(summary, epochs, calibration, data_note=data_note, use_gpu=use_gpu)
    time_split = timeline.time_split_rows(list(sessions), epochs)
    profiled = profiled if profiled is not None and not profiled.empty else None
    paths = write_results(out_dir, summary, epochs, evaluations, title_lines=title_lines,
                          target_acc=target_acc,
                          sections=(sheet.model_section, sheet.answers,
                                    *_profile_section(profiled, epochs)),
                          not_run=left_out_section(summary, epochs, calibration, left_out,
                                                   use_gpu),
                          time_split=time_split,
                          more_files=(*answer_sheet.files(sheet),
                                      *(("profile.csv",) if profiled is not None else ())))
    paths |= answer_sheet.write(out_dir, sheet)
    if profiled is not None:
        paths["profile.csv"] = out_dir / "profile.csv"
        write_atomically(paths["profile.csv"],
                         lambda path: profiled.to_csv(path, index=False))
    tables = ("Scaling\n" + varying_table(scaling_table(summary), SCALING_KEYS)
              + "\n\nStrategies\n" + varying_table(strategy_table(summary), STRATEGY_CELL)
              + "\n\nLearning rate per (workers, batch)\n"
              + varying_table(isolation_table(summary), ISOLATION_KEYS))
    if target_acc is not None:
        tables += "\n\nTime to accuracy\n" + time_to_accuracy.recommendation(summary, target_acc)
    if time_split:
        tables += "\n\nWhere the time went\n" + markdown_table(pd.DataFrame(time_split))
    failed = summary[summary["status"] == Status.FAILED]
    return SweepReport(tables, paths, dict(zip(failed["trial_id"], failed["error"])),
                       _trials_with(summary, Status.INTERRUPTED))


def _profile_section(profiled: pd.DataFrame | None, epochs: pd.DataFrame) -> tuple[str, ...]:
    lines = profile.section(profiled, epochs) if profiled is not None else []
    return ("\n".join(lines),) if lines else ()


def _trials_with(summary: pd.DataFrame, status: Status) -> list[str]:
    return list(summary[summary["status"] == status]["trial_id"])


def left_out_section(summary: pd.DataFrame, epochs: pd.DataFrame, calibration: dict | None,
                     left_out: Sequence[LeftOut], use_gpu: bool) -> list[str]:
    """report.md's lines on the points the cluster could not hold, each with the
    scaling model's what-if (what_if.py); none when every point ran."""
    if not left_out:
        return []
    lines = ["## Not run on this cluster", "",
             "Points of the preset that need more devices than this cluster has. Each is "
             "estimated by the scaling model (docs/SCALING_MODEL.md) from the 1-worker trial "
             "of its model and sync and the gradient bytes that the calibration counted, on "
             "named links, with each worker on a device of its own: **a what-if, not a "
             "measurement**.", ""]
    for cell in left_out:
        label = cell.line
        estimates = what_if(summary, epochs, calibration, cell, use_gpu)
        if not estimates:
            lines.append(f"- {label}. No estimate: no finished 1-worker trial of its model "
                         f"and sync, or no calibration.")
            continue
        over = "; ".join(f"{row['epoch_s']:.3g} s/epoch (speedup {row['speedup']:.2f}) over "
                         f"{row['link']}" for row in estimates)
        baseline = estimates[0]["baseline_trial"]
        graphed = ""
        if "step_graph" in epochs and (epochs[epochs["trial_id"] == baseline]["step_graph"]
                                       == "on").any():
            graphed = (" Its step ran as a CUDA graph, which several workers' steps do not "
                       "yet (training/graphed.py): the what-if assumes they would.")
        lines.append(f"- {label}. What-if: {over}; from trial `{baseline}`"
                     f" ({estimates[0]['baseline_epoch_s']:.3g} s/epoch measured on 1 worker)."
                     f"{graphed}")
    return [*lines, ""]


def write_results(out_dir: Path, summary: pd.DataFrame, epochs: pd.DataFrame,
                  evaluations: pd.DataFrame, *, title_lines: list[str],
                  target_acc: float | None = None, sections: tuple[str, ...] = (),
                  not_run: list[str] = (), time_split: list[dict] = (),
                  more_files: Sequence[str] = ()) -> dict[str, Path]:
    """Write every result file into `out_dir`; returns their paths by name.

    `summary` is what `summarize_trials` made of the trials, `epochs` and
    `evaluations` for `target_acc`; `sections` (markdown) end the report;
    `more_files`: the folder's other files the caller writes, for its list.
    """
    paths = {name: out_dir / name for name in ("trials.csv", "epochs.csv", "evaluations.csv",
                                               "report.md", *PLOT_FILES)}
    write_atomically(paths["trials.csv"], lambda path: summary.to_csv(path, index=False))
    write_atomically(paths["epochs.csv"], lambda path: epochs.to_csv(path, index=False))
    write_atomically(paths["evaluations.csv"], lambda path: evaluations.to_csv(path, index=False))
    report = render_report(summary, epochs, title_lines=title_lines, target_acc=target_acc,
                           sections=sections, not_run=not_run, time_split=time_split,
                           more_files=more_files)
    write_atomically(paths["report.md"], lambda path: path.write_text(report))
    plot_all(summary, epochs, evaluations, target_acc, paths)
    return paths


def _at_once_line(epochs: pd.DataFrame) -> str:
    """How many trials ran at once, and whether any two shared a node meanwhile."""
    spans = timeline.trial_spans(epochs)
    if spans.empty:
        return "Trials at once: not recorded (no start and end times in epochs.csv)."
    shared = timeline.shared_nodes(spans)
    pairs = counted(len({pair[:2] for pair in shared}), "pair")
    sharing = (f"{pairs} of trials shared a node while both ran" if shared
               else "no two trials shared a node while both ran")
    return (f"Trials at once: at most {timeline.max_trials_at_once(spans)}, on "
            f"{counted(spans['node'].nunique(), 'node')}; {sharing} (`timeline.png`).")


def _time_split_section(rows: list[dict]) -> list[str]:
    """report.md's "Where the time went" (timeline.time_split_rows); none without rows."""
    if not rows:
        return []
    return ["## Where the time went", "",
            "The sweep's wall time in its parts: the calibration and Tune's run of the "
            "trials, timed by the driver (every session of the sweep), and inside that each "
            "trial's own parts from its epochs, summed over the trials (trials that ran at "
            "once add up to more than the wall time, and Tune's share around them is then "
            "not split off). Training is what each epoch's time counts; every other part is "
            "a fixed cost of the sweep.", "",
            markdown_table(pd.DataFrame(rows)), ""]


def _mixed_graphs_text(summary: pd.DataFrame, epochs: pd.DataFrame) -> str:
    """A sentence where 1-worker trials replayed their step as a CUDA graph and
    several workers' launched theirs (`--cuda-graph on` in a GPU sweep of several
    worker counts, or such a sweep resumed from before `auto` held graphs off there):
    their speedups set one kind of step against the other."""
    if "step_graph" not in epochs or not (summary["num_workers"] > 1).any():
        return ""
    graphed = set(epochs.loc[epochs["step_graph"] == "on", "trial_id"])
    alone = summary[summary["num_workers"] == 1]
    if not alone["trial_id"].isin(graphed).any():
        return ""
    return (" Here the 1-worker trials' steps were replayed as CUDA graphs and several "
            "workers' were launched kernel by kernel (`step_graph` in epochs.csv): their "
            "speedups set the two kinds of step against each other, and part of what they "
            "read is the graph's gain, not the workers'.")


def _loss_scale_text(history: pd.DataFrame) -> str:
    """fp16's loss scale over a trial's epochs (training/loss_scale.py): the steps it
    skipped, their gradients not finite on some worker, and where it ended."""
    if "loss_scale" not in history or history["loss_scale"].isna().all():
        return ""
    skipped = int(history["skipped_steps"].sum())
    return (f"; fp16 loss scale {history['loss_scale'].iloc[-1]:g} at the end, "
            f"{counted(skipped, 'step')} skipped (overflowed)")


def render_report(summary: pd.DataFrame, epochs: pd.DataFrame, *, title_lines: list[str],
                  target_acc: float | None = None, sections: tuple[str, ...] = (),
                  not_run: list[str] = (), time_split: list[dict] = (),
                  more_files: Sequence[str] = ()) -> str:
    lines = ["# Sweep report", "", *title_lines, "", "## Trials", "",
             _at_once_line(epochs), "",
             "The book's line for each trial (time per epoch is training only, the mean "
             "of every epoch as the book's `train` prints it), the report's window beside "
             "it (`epoch_s`: the epochs after the first, which every table and answer "
             "times), and its memory format: `auto` times a few steps in each on the "
             "workers' devices and takes the faster (the workers' mean seconds a step).", ""]
    for row in summary.itertuples():
        history = epochs[epochs["trial_id"] == row.trial_id].sort_values("epoch")
        label = (f"`{row.trial_id}` {counted(row.num_workers, 'worker')}, batch {row.batch_size} "
                 f"({row.batch_scaling}), lr {row.lr:g}, sync {row.sync}, split {row.split}, "
                 f"{row.precision}")
        if len(history):
            # Where its gradients were summed: one strategy may run over two transports.
            transport = history["transport"].iloc[-1] if "transport" in history else ""
            if isinstance(transport, str) and transport not in ("", "none"):
                label += f", over {transport}"
            label += (f", memory format {memory_format_text(history.iloc[0])}"
                      f"{step_graph_text(history.iloc[-1])}")
        outcome = (book_line(history.to_dict("records"))
                   + memory_text(history.to_dict("records"), getattr(row, "memory_floor_mb", None))
                   if len(history) else f"no epoch finished: {row.error}")
        if len(history) > 1 and not pd.isna(row.epoch_s):
            outcome += f" (epochs after the first: {seconds_text(row.epoch_s)} s each)"
        outcome += _loss_scale_text(history)
        lines.append(f"- {label}: {outcome} [{row.status}]")
    lines += ["", *_time_split_section(time_split), *not_run, "## Scaling", "",
              "Every time, throughput, speedup and sync share comes from one window of each "
              "trial: its epochs after the first, whose warm-up the others do not pay "
              "(`epoch_s` is their mean). Speedup is throughput (samples/s) against the "
              "throughput of the mean `epoch_s` of the 1-worker trials (every seed) with the "
              "same model, sync, split, precision, batch and lr, so that it is the ratio of "
              "the two epoch times; efficiency is speedup / workers; workers that shared "
              "a GPU took turns on it and give none, nor do GPU workers given a fraction of "
              "one each (`--gpus-per-worker` 0.5 or less), whose sums went over gloo "
              "through the host, not NCCL's, wherever Ray placed them. Each row is the mean "
              "over its `trials`, which did the same work each epoch (its key columns, `transport` where "
              "the gradients were summed among them) and may differ in the seed, the lr "
              "and its warm-up, and the number of epochs; its "
              "throughput and speedup are those of its mean `epoch_s`; "
              "`epoch_time_spread` is their slowest epoch time over their fastest, "
              f"minus 1.{_mixed_graphs_text(summary, epochs)}", "",
              varying_table(scaling_table(summary), SCALING_KEYS), "",
              "## Strategies", "",
              "Per sync strategy, split, precision and worker count, on equal work (the "
              "same threads, straggler, transport and global batch): seconds per epoch, "
              "the share of it spent in gradient sync, and the speedup, each the median "
              "over the cell's trials (their lrs and seeds).", "",
              varying_table(strategy_table(summary), STRATEGY_CELL), "",
              "## Split per worker", "",
              "Each worker's examples per step (its share of the global batch) and its seconds "
              "of forward and backward, per rank, in a trial's first and last epoch; a "
              "worker that computes much less than another waits for it at every step. "
              "`epochs.csv` has every epoch.", "",
              varying_table(split_table(summary, epochs), SPLIT_KEYS), "",
              "## Learning rate per (workers, batch)", "",
              "The best lr of each cell (workers, batch, epochs and warm-up) by final "
              "test accuracy (`best_base_lr`: the grid's lr it was scaled from), the mean "
              "over its `trials` (seeds, each counted once), `acc_range` their range; `on_edge` flags a best "
              "value at the end of the range searched, where a wider range may do better.", "",
              varying_table(isolation_table(summary), ISOLATION_KEYS), ""]
    if target_acc is not None:
        lines += ["## Time to accuracy", "",
                  f"Target: test accuracy {target_acc:g}. Training seconds exclude evaluation; "
                  f"wall seconds count from the trial's start (worker start-up, evaluations and "
                  f"checkpoints included). The trials that reached it, fastest first:", "",
                  varying_table(time_to_accuracy.ranking(summary), time_to_accuracy.RANKING_KEYS), "",
                  time_to_accuracy.baseline_line(summary, target_acc), "",
                  f"**Recommended:** {time_to_accuracy.recommendation(summary, target_acc)}", ""]
    lines += [*sections, "## Files", "", *[f"- `{name}`" for name in
                                ("trials.csv", "epochs.csv", "evaluations.csv", *PLOT_FILES,
                                 *more_files)], ""]
    return "\n".join(lines)
