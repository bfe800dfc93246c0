"""`--profile-steps`' summaries (training/profiling.py) read back: profile.csv's
rows, report.md's section and train.py's lines.

Each profiled epoch's row holds every rank's summary (`profile`, JSON): the steps
profiled, their wall time a step, the top ops by self time a step (on a GPU its
kernels), and on a GPU the kernels a step and the device's busy time in it.
"""

import json

import pandas as pd

from orchestrator.records import Status, counted
from orchestrator.report.tables import markdown_table

RANK_COLUMNS = ["rank", "device", "steps", "step_ms", "kernels", "device_busy_ms",
                "nccl_busy_ms"]
PROFILE_COLUMNS = ["trial_id", *RANK_COLUMNS, "op", "calls", "self_cpu_ms", "self_device_ms",
                   "trace", "error"]
# Ops in train.py's lines (profile.csv and report.md hold the summary's all).
PRINTED_OPS = 5
# A CUDA kernel's name runs to hundreds of characters of C++ templates ("void
# at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(...)"):
# printed and tabled cut to this, as torch's own profiler table cuts its names;
# profile.csv keeps each whole.
OP_NAME_CHARS = 80


def short_op(name: str) -> str:
    """An op's or kernel's name cut to OP_NAME_CHARS, "..." where it was cut."""
    return name if len(name) <= OP_NAME_CHARS else name[:OP_NAME_CHARS - 3] + "..."


def _op_cell(name: str) -> str:
    """A name as a markdown table's cell: a code span, so that a kernel's `<float>`
    is not read as an HTML tag (and dropped) nor its `*` as emphasis; a `|` escaped,
    as GitHub's tables ask even inside a code span."""
    return "`" + short_op(name).replace("|", "\\|") + "`"


def summaries(history: pd.DataFrame) -> list[dict]:
    """Every rank's summary from a run's epoch rows (none where it was not profiled;
    a rank whose window held no step is left out)."""
    if "profile" not in history:
        return []
    texts = [text for text in history["profile"] if isinstance(text, str) and text]
    return [rank for text in texts for rank in json.loads(text) if rank]


def rows(history: pd.DataFrame, trial_id: str) -> list[dict]:
    """profile.csv's rows of one trial: one per rank and op (a rank whose summary
    failed: one, with its `error`)."""
    return [{"trial_id": trial_id, **{key: rank.get(key) for key in RANK_COLUMNS},
             **op, "trace": rank.get("trace"), "error": rank.get("error")}
            for rank in summaries(history) for op in (rank["ops"] or [{}])]


def rank_line(rank: dict) -> str:
    """One rank's profiled steps in a sentence: the time a step, and on a GPU how
    busy the device was (a step far from busy is bound by its launches)."""
    line = (f"rank {rank['rank']} ({rank['device']}): {counted(rank['steps'], 'step')} "
            f"profiled, {rank['step_ms']:.3g} ms a step")
    if _known(rank.get("kernels")):
        busy = rank["device_busy_ms"]
        line += (f"; {rank['kernels']:.0f} kernels a step, the device busy {busy:.3g} ms "
                 f"of it ({busy / rank['step_ms']:.0%})")
        if _known(rank.get("nccl_busy_ms")) and rank["nccl_busy_ms"] > 0:
            line += (f", NCCL's kernels {rank['nccl_busy_ms']:.3g} ms (their wait for the "
                     f"other ranks in)")
    if _known(rank.get("error")):
        line += f"; {rank['error']}"
    return line


def trace_part(rank: dict, quote: str = "") -> str:
    """Where a rank's trace is, to end its sentence (nothing where none was written)."""
    return f"; trace {quote}{rank['trace']}{quote}" if _known(rank.get("trace")) else ""


def unprofiled_line(history: pd.DataFrame) -> str | None:
    """The same run's step unprofiled, beside which a profiled step's time shows the
    profiler's overhead: its epochs after the first (the report's window) that ran
    whole (not diverged, with a throughput), their mean training seconds a step;
    None where it has no such epoch (a run of one epoch)."""
    if "samples_per_s" not in history or "global_batch_size" not in history:
        return None
    later = history[(history["epoch"] > history["epoch"].min())
                    & (history["samples_per_s"] > 0)]  # NaN and a stopped epoch's 0: out
    if "status" in later:
        later = later[later["status"] == Status.OK]
    if later.empty:
        return None
    # An epoch's training seconds over its steps: a step's examples at its throughput.
    step_ms = 1e3 * (later["global_batch_size"] / later["samples_per_s"]).mean()
    return (f"unprofiled, the epochs after the first took {step_ms:.3g} ms a step (a "
            f"profiled step's time beyond this: the profiler's overhead, and the first "
            f"epoch's own pace)")


def _known(value) -> bool:
    return value is not None and value == value  # None, or NaN read back from a CSV: not


def ranked_by(rank: dict) -> tuple[str, str]:
    """(what the top rows are, the time they are ranked by): a GPU's kernels by
    device time, a CPU's ops by host time."""
    return (("kernels", "self_device_ms") if _known(rank.get("kernels"))
            else ("ops", "self_cpu_ms"))


def printed_lines(history: list[dict]) -> list[str]:
    """train.py's lines: each rank's sentence, the run's unprofiled step, then rank
    0's top ops."""
    frame = pd.DataFrame(history)
    ranks = summaries(frame)
    if not ranks:
        return []
    first = ranks[0]
    kind, key = ranked_by(first)
    lines = ["profile: " + rank_line(rank) + trace_part(rank) for rank in ranks]
    unprofiled = unprofiled_line(frame)
    if unprofiled is not None:
        lines.append(f"profile: {unprofiled}")
    if first["ops"]:
        ops = ", ".join(f"{short_op(op['op'])} {op[key]:.3g} ms"
                        for op in first["ops"][:PRINTED_OPS])
        lines.append(f"profile: rank {first['rank']}'s top {kind} a step: {ops}")
    return lines


def section(frame: pd.DataFrame, epochs: pd.DataFrame | None = None) -> list[str]:
    """report.md's "Profiled steps": per trial, each rank's sentence and trace, its
    unprofiled step (from `epochs`, the sweep's epoch rows, where given), and its first
    rank's top ops a step; none where no trial was profiled."""
    if frame.empty:
        return []
    lines = ["## Profiled steps", "",
             "`--profile-steps`: steps of each trial's first epoch under torch.profiler on "
             "every worker, after its warm-up steps and before its first evaluation. The "
             "first epoch is outside every time per epoch above; the time to a target "
             "counts the profiled steps, the profiler's overhead in them (its start and "
             "stop not). Times are per step, that overhead in them; an op's self time "
             "leaves out the ops it calls; on a GPU the rows are its kernels (its host ops "
             "where its line says no kernel was recorded), and the "
             "device's busy time is the union of their intervals. Every rank's top rows "
             "are in `profile.csv`; each trace opens in Perfetto (ui.perfetto.dev) or "
             "TensorBoard.", ""]
    for trial_id, trial in frame.groupby("trial_id", sort=False):
        ranks = trial.drop_duplicates("rank")
        lines += [f"### {trial_id}", ""]
        lines += [f"- {rank_line(rank)}{trace_part(rank, '`')}"
                  for rank in ranks.to_dict("records")]
        if epochs is not None:
            unprofiled = unprofiled_line(epochs[epochs["trial_id"] == trial_id])
            lines += [f"- {unprofiled}"] if unprofiled is not None else []
        first = trial[(trial["rank"] == trial["rank"].min()) & trial["op"].notna()]
        if first.empty:
            lines.append("")
            continue
        kind, key = ranked_by(first.iloc[0].to_dict())
        lines += ["", f"Rank {int(first['rank'].iloc[0])}'s top {kind} a step:", "",
                  markdown_table(first[["op", "calls", key]].assign(
                      op=first["op"].map(_op_cell))), ""]
    return lines
