"""`--profile-steps`' summaries (training/profiling.py) read back: profile.csv's
rows, report.md's section and train.py's lines.

Each profiled epoch's row holds every rank's summary (`profile`, JSON): the steps
profiled, their wall time a step, the top ops by self time a step, and on a GPU
the kernels a step and the device's busy time in it.
"""

import json

import pandas as pd

from orchestrator.records import counted
from orchestrator.report.tables import markdown_table

PROFILE_COLUMNS = ["trial_id", "rank", "device", "steps", "step_ms", "kernels",
                   "device_busy_ms", "op", "calls", "self_cpu_ms", "self_device_ms", "trace"]
# Ops in train.py's lines (profile.csv and report.md hold the summary's all).
PRINTED_OPS = 5


def summaries(history: pd.DataFrame) -> list[dict]:
    """Every rank's summary from a run's epoch rows (none where it was not profiled;
    a rank whose window held no step is left out)."""
    if "profile" not in history:
        return []
    texts = [text for text in history["profile"] if isinstance(text, str) and text]
    return [rank for text in texts for rank in json.loads(text) if rank]


def rows(history: pd.DataFrame, trial_id: str) -> list[dict]:
    """profile.csv's rows of one trial: one per rank and op."""
    return [{"trial_id": trial_id, **{key: rank[key] for key in PROFILE_COLUMNS[1:7]},
             **op, "trace": rank["trace"]}
            for rank in summaries(history) for op in rank["ops"]]


def rank_line(rank: dict) -> str:
    """One rank's profiled steps in a sentence: the time a step, and on a GPU how
    busy the device was (a step far from busy is bound by its launches)."""
    line = (f"rank {rank['rank']} ({rank['device']}): {counted(rank['steps'], 'step')} "
            f"profiled, {rank['step_ms']:.3g} ms a step")
    if rank.get("kernels") is not None:
        busy = rank["device_busy_ms"]
        line += (f"; {rank['kernels']:.0f} kernels a step, the device busy {busy:.3g} ms "
                 f"of it ({busy / rank['step_ms']:.0%})")
    return line


def _time_key(rank: dict) -> str:
    return "self_cpu_ms" if rank.get("kernels") is None else "self_device_ms"


def printed_lines(history: list[dict]) -> list[str]:
    """train.py's lines: each rank's sentence, then rank 0's top ops."""
    ranks = summaries(pd.DataFrame(history))
    if not ranks:
        return []
    first, key = ranks[0], _time_key(ranks[0])
    where = "device" if key == "self_device_ms" else "CPU"
    ops = ", ".join(f"{op['op']} {op[key]:.3g} ms" for op in first["ops"][:PRINTED_OPS])
    return ["profile: " + rank_line(rank) + f"; trace {rank['trace']}" for rank in ranks] + [
        f"profile: rank {first['rank']}'s top ops by self {where} time a step: {ops}"]


def section(frame: pd.DataFrame) -> list[str]:
    """report.md's "Profiled steps": per trial, each rank's sentence and trace, and
    its first rank's top ops a step; none where no trial was profiled."""
    if frame.empty:
        return []
    lines = ["## Profiled steps", "",
             "`--profile-steps`: steps of each trial's first epoch under torch.profiler on "
             "every worker, after its warm-up steps and before its first evaluation (the "
             "first epoch is outside every timing above). Times are per step, the "
             "profiler's own overhead in them; an op's self time leaves out the ops it "
             "calls. Every rank's top ops are in `profile.csv`; each trace opens in Perfetto "
             "(ui.perfetto.dev) or TensorBoard.", ""]
    for trial_id, trial in frame.groupby("trial_id", sort=False):
        ranks = trial.drop_duplicates("rank")
        lines += [f"### {trial_id}", ""]
        lines += [f"- {rank_line(rank)}; trace `{rank['trace']}`"
                  for rank in ranks.to_dict("records")]
        first = trial[trial["rank"] == trial["rank"].min()]
        table = first[["op", "calls", "self_cpu_ms", "self_device_ms"]]
        if first["kernels"].isna().all():
            table = table.drop(columns="self_device_ms")
        lines += ["", f"Rank {int(first['rank'].iloc[0])}'s top ops a step:", "",
                  markdown_table(table), ""]
    return lines
