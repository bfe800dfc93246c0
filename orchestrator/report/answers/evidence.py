"""What every answer in `report/answers/` uses: a part's trials, the noise between
two identical trials, comparisons that respect it, and the commands that fill
a gap in a sweep."""

import math
from dataclasses import dataclass

import pandas as pd

from orchestrator.records import Status

EXERCISES_COMMAND = "python experiments/sweep.py --preset exercises"
GPU_COMMAND = f"{EXERCISES_COMMAND} --address <cluster with GPUs>"
MORE_WORKERS_COMMAND = f"{EXERCISES_COMMAND} --address <a cluster with more CPUs or GPUs>"
# Where the sweep holds no two identical trials.
ASSUMED_TIME_NOISE, ASSUMED_ACC_NOISE = 0.05, 0.01
# The exercises preset's 1-worker trials of parts batch-global and batch-lr
# agree on all of these: they differ only in which part made them.
TWIN_KEYS = ["model", "sync", "split", "precision", "momentum", "batch_size", "lr",
             "num_epochs", "threads_per_worker", "straggler_slowdown"]


@dataclass(frozen=True)
class Noise:
    time_fraction: float  # two identical trials' epoch times: larger / smaller - 1
    acc: float  # their accuracies' difference, at least the test set's sampling error
    assumed: bool
    num_test_examples: int | None = None

    def time_label(self) -> str:
        return percent(self.time_fraction) + (" assumed" if self.assumed else "")

    def acc_label(self) -> str:
        return f"{self.acc:.3f}" + (" assumed" if self.assumed else "")

    def sentence(self) -> str:
        if self.assumed:
            return (f"This sweep holds no two identical trials, so the noise is assumed: "
                    f"{percent(self.time_fraction)} in time and {self.acc:.3f} in test "
                    f"accuracy. Differences below these are reported as within noise.")
        sampling = (f" (at least two standard errors of an accuracy measured on "
                    f"{self.num_test_examples} test images: the runs are seeded alike, so two "
                    f"identical ones agree to the digit)" if self.num_test_examples else "")
        return (f"Noise: two identical 1-worker trials (parts batch-global and batch-lr) "
                f"differed by {percent(self.time_fraction)} in epoch time; the accuracy noise "
                f"is {self.acc:.3f}{sampling}. Differences below these are reported as "
                f"within noise.")


def estimate_noise(summary: pd.DataFrame, num_test_examples: int | None = None) -> Noise:
    """From the two identical 1-worker trials; the accuracy noise is at least two
    standard errors of a test accuracy on `num_test_examples` images."""
    one_worker = summary[summary["num_workers"] == 1]
    pairs = timed(part_trials(one_worker, "batch-global")).merge(
        timed(part_trials(one_worker, "batch-lr")), on=TWIN_KEYS, suffixes=("_a", "_b"))
    pairs = pairs.dropna(subset=["final_test_acc_a", "final_test_acc_b"])
    if pairs.empty:
        return Noise(ASSUMED_TIME_NOISE, ASSUMED_ACC_NOISE, assumed=True)
    pair = pairs.iloc[0]
    times_s = sorted([pair["mean_epoch_time_s_a"], pair["mean_epoch_time_s_b"]])
    acc = pair["final_test_acc_a"]
    sampling = 2 * math.sqrt(acc * (1 - acc) / num_test_examples) if num_test_examples else 0.0
    return Noise(times_s[1] / times_s[0] - 1,
                 max(abs(acc - pair["final_test_acc_b"]), sampling), assumed=False,
                 num_test_examples=num_test_examples)


def compare_times(time_s: float, other_s: float, noise: Noise) -> str:
    """How `time_s` stands to `other_s`, to be followed by the other's name:
    "1.87x faster than", or "within noise (2% apart, noise 3%) of"."""
    if within_noise(time_s, other_s, noise):
        apart = max(time_s, other_s) / min(time_s, other_s) - 1
        return f"within noise ({percent(apart)} apart, noise {noise.time_label()}) of"
    if time_s < other_s:
        return f"{other_s / time_s:.2f}x faster than"
    return f"{time_s / other_s:.2f}x slower than"


def within_noise(time_s: float, other_s: float, noise: Noise) -> bool:
    return max(time_s, other_s) / min(time_s, other_s) - 1 <= noise.time_fraction


def compare_acc(acc: float, other_acc: float, noise: Noise) -> str:
    """As `compare_times`, for test accuracies: "0.031 higher than" or "within noise (...) of"."""
    gap = acc - other_acc
    if abs(gap) <= noise.acc:
        return f"within noise ({abs(gap):.3f} apart, noise {noise.acc_label()}) of"
    return f"{abs(gap):.3f} {'higher' if gap > 0 else 'lower'} than"


def percent(fraction: float) -> str:
    return f"{fraction:.0%}" if abs(fraction) >= 0.1 else f"{fraction:.1%}"


def part_trials(summary: pd.DataFrame, part: str) -> pd.DataFrame:
    """The trials the exercises preset made for `part`, failed ones left out."""
    return summary[(summary["part"] == part) & (summary["status"] != Status.FAILED)]


def timed(trials: pd.DataFrame) -> pd.DataFrame:
    """Those with at least one epoch timed, fewest workers first."""
    return trials.dropna(subset=["mean_epoch_time_s"]).sort_values("num_workers")


def at_workers(trials: pd.DataFrame, num_workers: int):
    """The first trial with `num_workers`, or None."""
    rows = trials[trials["num_workers"] == num_workers]
    return None if rows.empty else rows.iloc[0]


def missing_part(parts: str, command: str = EXERCISES_COMMAND) -> str:
    return f"This sweep has no usable trials of part {parts}: `{command}` runs them."


def one_worker_count(trials: pd.DataFrame) -> str:
    counts = ", ".join(str(count) for count in sorted(trials["num_workers"].unique()))
    return (f"This sweep ran {counts} worker(s) only, and the answer needs two worker counts "
            f"or more: `{MORE_WORKERS_COMMAND}` runs 1, 2, 4, ... up to what the cluster "
            f"holds.")


def numbers(values) -> str:
    return ", ".join(f"{value:g}" for value in sorted(set(values)) if not math.isnan(value))
