"""How the answers put counts, seeds and shares into words, and the commands
that fill a gap in a sweep, which an answer names where the sweep lacks what it
needs."""

import math

import pandas as pd

from orchestrator.records import counted

EXERCISES_COMMAND = "python experiments/sweep.py --preset exercises"
GPU_COMMAND = f"{EXERCISES_COMMAND} --address <cluster with GPUs>"
MORE_WORKERS_COMMAND = f"{EXERCISES_COMMAND} --address <a cluster with more CPUs or GPUs>"
REPEATS_COMMAND = "--repeats 3"


def seeds_text(count: int) -> str:
    """How many replicas stand behind a cell's numbers: "mean of 3 seeds" or "1 seed"."""
    count = int(count)
    return f"mean of {count} seeds" if count > 1 else "1 seed"


def acc_seeds_text(row: pd.Series) -> str:
    """`seeds_text` for an accuracy, naming the seeds that did not learn and the mean of
    those that did: "mean of 3 seeds, 1 of which did not learn; the 2 that learned:
    0.825" (or "1 seed, which did not learn")."""
    text = learned_seeds_text(row["seeds"], row.get("not_learned", 0))
    failed, learned_acc = int(row.get("not_learned", 0) or 0), row.get("learned_acc")
    if 0 < failed < int(row["seeds"]) and learned_acc is not None and not pd.isna(learned_acc):
        text += f"; the {int(row['seeds']) - failed} that learned: {learned_acc:.3f}"
    return text


def learned_seeds_text(count: int, not_learned: int | None) -> str:
    """`acc_seeds_text` from a cell's seed count and how many of them did not learn."""
    text, failed = seeds_text(count), int(not_learned or 0)
    if not failed:
        return text
    return (f"{text}, which did not learn" if int(count) == 1
            else f"{text}, {failed} of which did not learn")


def listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def seeds_label(seeds: tuple[float, ...]) -> str:
    """"seed 0", "seeds 0 and 1", "seeds 0, 1 and 2"."""
    return ("seed " if len(seeds) == 1 else "seeds ") + listed([f"{seed:g}" for seed in seeds])


def in_short(text: str) -> str:
    """A section's first paragraph: its answer in a sentence or two, each figure
    decided as the paragraphs below it decide it (they give the tests)."""
    return f"**In short:** {text}"


def percent(fraction: float) -> str:
    return f"{fraction:.0%}" if abs(fraction) >= 0.1 else f"{fraction:.1%}"


def missing_part(parts: str, command: str = EXERCISES_COMMAND) -> str:
    return f"This sweep has no usable trials of part {parts}: `{command}` runs them."


def one_worker_count(trials: pd.DataFrame) -> str:
    counts = sorted(trials["num_workers"].unique())
    ran = (counted(counts[0], "worker") if len(counts) == 1
           else f"{', '.join(str(count) for count in counts)} workers")
    return (f"This sweep ran {ran} only, and the answer needs two worker counts "
            f"or more: `{MORE_WORKERS_COMMAND}` runs 1, 2, 4, ... up to what the cluster "
            f"holds.")


def numbers(values) -> str:
    return ", ".join(f"{value:g}" for value in sorted(set(values)) if not math.isnan(value))
