"""What every answer in `report/answers/` uses: a part's trials, replicas averaged
into cells, the noise of repeated work across the sweep, comparisons that respect
it, and the commands that fill a gap in a sweep.

Like for like: every epoch time an answer compares is `epoch_s`, each trial's mean
over its epochs after the first (the warm-up epoch left out of every trial alike,
as in the report and the scaling model), and each trial carries the `transport`
its gradients were summed through.
"""

import math
from dataclasses import dataclass

import pandas as pd

from orchestrator.records import Status
from orchestrator.report.noise_scale import LEARNED_ACC_MARGIN, LEARNED_LOSS_FRACTION, learned
from orchestrator.report.summary import timed_epochs, with_speedup

EXERCISES_COMMAND = "python experiments/sweep.py --preset exercises"
GPU_COMMAND = f"{EXERCISES_COMMAND} --address <cluster with GPUs>"
MORE_WORKERS_COMMAND = f"{EXERCISES_COMMAND} --address <a cluster with more CPUs or GPUs>"
REPEATS_COMMAND = "--repeats 3"
# Where the sweep holds no repeated work, or no configuration run with two seeds.
ASSUMED_TIME_NOISE, ASSUMED_ACC_NOISE = 0.05, 0.01
# Trials that share these do the same work per epoch: a seed changes the weights
# and the shuffle, an lr (or its warm-up) the size of the steps, neither the work.
# The transport (`prepared` adds it) tells one strategy over shared memory from
# the same over the process group.
WORK_KEYS = ["model", "sync", "transport", "split", "precision", "threads_per_worker",
             "straggler_slowdown", "num_workers", "global_batch_size", "momentum"]
# Trials that share these as well differ only in the seed: replicas.
CONFIG_KEYS = [*WORK_KEYS, "lr", "num_epochs", "warmup_epochs", "warmup_start_lr"]
# At one worker these strategies run the same code, the base class's step with
# no sync (GradientSync.synchronize returns at once): their 1-worker trials are
# the same work, and what separates their times is noise.
IDLE_AT_ONE_WORKER = ("scratch", "bucketed", "root")
# What a cell averages over its replicas; the rest is the configuration's own.
MEASURES = ["epoch_s", "mean_epoch_time_s", "eval_s", "final_test_acc",
            "best_test_acc", "samples_per_s", "sync_share", "speedup", "efficiency"]


@dataclass(frozen=True)
class Noise:
    time_fraction: float
    """The largest spread of `epoch_s`, slowest over fastest minus 1 (the scale of every
    "apart" that `compare_times` holds against it), of any group of
    trials doing identical work."""
    acc: float
    """The largest range of final test accuracy over the seeds of one configuration."""
    time_groups: tuple[int, int] = (0, 0)
    """(groups, trials) the time noise came from; (0, 0): assumed."""
    acc_groups: tuple[int, int] = (0, 0)
    """(configurations, largest number of seeds of one) the accuracy noise came from."""
    trial_epochs: tuple[int, ...] = ()
    """The lengths, in epochs, of the trials timed: `epoch_s` is each one's mean over
    its epochs after the first (`summary.steady_epochs`)."""
    acc_not_learned: int = 0
    """Replicas left out of the accuracy noise: seeds of a replicated configuration
    that did not learn (`noise_scale.learned`), a failure each answer names, not noise."""

    def time_label(self) -> str:
        return percent(self.time_fraction) + ("" if self.time_groups[0] else " assumed")

    def acc_label(self) -> str:
        return f"{self.acc:.3f}" + ("" if self.acc_groups[0] else " assumed")

    def sentence(self) -> str:
        window = window_sentence(self.trial_epochs)
        groups, trials = self.time_groups
        if groups:
            time = (f"Time noise: identical work (trials that differ only in the seed or the "
                    f"lr, which change the weights, not the work of an epoch, or at one worker "
                    f"only in the sync strategy among {', '.join(IDLE_AT_ONE_WORKER)}, which "
                    f"sum nothing there) varied by up to "
                    f"{percent(self.time_fraction)} in epoch time (the slowest over the "
                    f"fastest, as every \"apart\" below), over {counted(groups, 'group')} of "
                    f"{trials} trials across the sweep.")
        else:
            time = (f"Time noise: this sweep repeats no work, so it is assumed: "
                    f"{percent(self.time_fraction)}.")
        configurations, seeds = self.acc_groups
        if configurations:
            acc = (f"Accuracy noise: the same configuration's final test accuracy varied by up "
                   f"to {self.acc:.3f} over its seeds "
                   f"({counted(configurations, 'configuration')} run "
                   f"with up to {seeds} seeds).")
        elif self.acc_not_learned:
            acc = (f"Accuracy noise: no configuration has two or more seeds that learned, so "
                   f"it is assumed: {self.acc:.3f} (`{REPEATS_COMMAND}` replicates every "
                   f"point).")
        else:
            acc = (f"Accuracy noise: no configuration ran with two seeds or more, so it is "
                   f"assumed: {self.acc:.3f} (`{REPEATS_COMMAND}` replicates every point).")
        if self.acc_not_learned:
            seeds = ("1 seed that did not learn" if self.acc_not_learned == 1
                     else f"{self.acc_not_learned} seeds that did not learn")
            acc += (f" {seeds} (final train loss above {LEARNED_LOSS_FRACTION:.0%} of a "
                    f"uniform guess's, ln(classes), or test accuracy above chance's by no "
                    f"more than half of it, at most {LEARNED_ACC_MARGIN:g}: stuck on the "
                    f"initial plateau or "
                    f"diverged) {'is' if self.acc_not_learned == 1 else 'are'} left out of "
                    f"it: a run that does not learn is a failure, which the answers name where they "
                    f"use its configuration, not the spread of runs that do.")
        return (f"{window} {time} {acc} A difference is a finding only beyond its noise; "
                f"below it, it is reported as within noise. Each number says how many seeds "
                f"(replicas) it is the mean of; a mean of several is steadier than one trial, "
                f"so these thresholds, taken from single trials, are conservative.")


def window_sentence(trial_epochs: tuple[int, ...]) -> str:
    """Which epochs every time, speedup, sync share and the time noise count, for
    trials of `trial_epochs` epochs."""
    if not trial_epochs:
        return ("Epoch times are each trial's mean over its epochs after the first (the "
                "first, warm-up epoch left out of every trial alike).")
    longer = [n for n in trial_epochs if n > 1]
    if not longer:
        return "Epoch times are each trial's one epoch (every trial ran one epoch only)."
    spans = ["epoch 2 of the 2-epoch trials" if n == 2 else f"epochs 2 to {n} of the "
             f"{n}-epoch trials" for n in longer]
    if len(longer) < len(trial_epochs):
        spans.append("the only epoch of a 1-epoch trial")
    listed = spans[0] if len(spans) == 1 else ", ".join(spans[:-1]) + " and " + spans[-1]
    return (f"Epoch times are each trial's mean over its epochs after the first ({listed}): "
            f"the first, warm-up epoch is left out of every trial alike, and the speedups, "
            f"efficiencies, sync shares, the time noise below and the scaling model's "
            f"measured epochs all count the same epochs.")


def prepared(summary: pd.DataFrame, epochs: pd.DataFrame) -> tuple[pd.DataFrame, tuple]:
    """The summary with each trial's `epoch_s`, `sync_share`, throughput, speedup and
    efficiency read from one timing window, the report's and the scaling model's: its
    epochs after the first (`summary.steady_epochs`); its `transport`; and the lengths,
    in epochs, of the trials timed (the answers say which epochs they count).

    The speedup is against `baseline_rate`, the throughput of the mean `epoch_s` of
    the 1-worker trials of the same setup (every seed), so that a speedup printed
    beside two epoch times is their ratio (`cell` keeps it so)."""
    runs = epochs[epochs["trial_id"].isin(summary["trial_id"])]
    timed = timed_epochs(runs)
    summary = summary.assign(**{column: summary["trial_id"].map(timed[column])
                                for column in ("epoch_s", "sync_share", "eval_s",
                                               "epoch_examples")})
    summary = with_speedup(summary)
    if "warmup_start_lr" not in summary:  # a sweep from before it was recorded: from zero
        summary["warmup_start_lr"] = 0.0
    transport = (runs.sort_values("epoch").groupby("trial_id")["transport"].last()
                 if "transport" in runs else pd.Series(dtype=object))
    summary["transport"] = summary["trial_id"].map(transport).fillna("")
    return summary, tuple(sorted({int(last) for _, last in timed["epochs_timed"]}))


def estimate_noise(summary: pd.DataFrame, trial_epochs: tuple[int, ...] = ()) -> Noise:
    """From a `prepared` summary: the time noise from every group of trials doing
    identical work, the accuracy noise from every configuration run with several seeds."""
    usable = summary[summary["status"] != Status.FAILED]
    timed_trials = usable.dropna(subset=["epoch_s"])
    alone = (timed_trials["num_workers"] == 1) & timed_trials["sync"].isin(IDLE_AT_ONE_WORKER)
    same_work = timed_trials.assign(sync=timed_trials["sync"].where(~alone, "no sync"))
    time_groups = [group["epoch_s"] for _, group in same_work.groupby(WORK_KEYS)
                   if len(group) > 1]
    if time_groups:
        time_fraction = max(group.max() / group.min() - 1 for group in time_groups)
        time_from = (len(time_groups), sum(len(group) for group in time_groups))
    else:
        time_fraction, time_from = ASSUMED_TIME_NOISE, (0, 0)
    scored = usable.dropna(subset=["final_test_acc"])
    # Trials of one configuration and seed (a study's twins) count as one replica.
    # A summary from before the warm-up's start was recorded lacks it: from zero for all.
    config_keys = [key for key in CONFIG_KEYS if key in scored]
    per_seed = scored.assign(learned=learned(scored)).groupby([*config_keys, "seed"]).agg(
        final_test_acc=("final_test_acc", "mean"), learned=("learned", "all")).reset_index()
    replicated = [group for _, group in per_seed.groupby(config_keys) if len(group) > 1]
    # One seed left on LeNet's plateau (accuracy 0.10) beside two at 0.82 is a failure
    # to report, not a spread of 0.72 that would hide every other difference.
    not_learned = sum(int((~group["learned"]).sum()) for group in replicated)
    acc_groups = [group[group["learned"]] for group in replicated]
    acc_groups = [group for group in acc_groups if len(group) > 1]
    if acc_groups:
        acc = max(group.max() - group.min() for group in
                  (group["final_test_acc"] for group in acc_groups))
        acc_from = (len(acc_groups), max(len(group) for group in acc_groups))
    else:
        acc, acc_from = ASSUMED_ACC_NOISE, (0, 0)
    return Noise(time_fraction, acc, time_from, acc_from, trial_epochs, not_learned)


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


# A difference of accuracies is called at this two-sided level of Welch's test on
# the replicas, where both sides have two seeds or more.
SIGNIFICANCE = 0.05


def compare_acc(acc: float, other_acc: float, noise: Noise, test: "Welch | None" = None,
                sizes: tuple[int, int] = (0, 0)) -> str:
    """As `compare_times`, for test accuracies: "0.031 higher than" or "within noise (...)
    of"; with `test` (Welch's, on the two sides' `sizes` seeds) decided by it, not by
    the sweep's noise (the largest range of any one configuration's seeds, which would
    call a gap the seeds resolve noise)."""
    gap = acc - other_acc
    if test is not None:
        text = test.text(sizes)
        if test.p < SIGNIFICANCE:
            return f"{abs(gap):.3f} {'higher' if gap > 0 else 'lower'} ({text}) than"
        return f"not significantly different ({abs(gap):.3f} apart; {text}) from"
    if abs(gap) <= noise.acc:
        return f"within noise ({abs(gap):.3f} apart, noise {noise.acc_label()}) of"
    return f"{abs(gap):.3f} {'higher' if gap > 0 else 'lower'} than"


def compare_cells(cell_row: pd.Series, other: pd.Series, noise: Noise) -> str:
    """`compare_acc` of two cells' final test accuracies, by Welch's test on their
    seeds (`cell`'s `seed_accs`) where both have two or more and every seed learned
    (a seed that did not learn is a failure the sentence names, not a spread);
    else by the sweep's noise."""
    seeds = [list(row.get("seed_accs", ()) or ()) for row in (cell_row, other)]
    failed = any(int(row.get("not_learned", 0) or 0) for row in (cell_row, other))
    test = None if failed else welch(*seeds)
    return compare_acc(cell_row["final_test_acc"], other["final_test_acc"], noise, test,
                       (len(seeds[0]), len(seeds[1])))


@dataclass(frozen=True)
class Welch:
    """Welch's t test of two samples' means (unequal variances): t, its degrees of
    freedom (Welch-Satterthwaite) and the two-sided p-value."""

    t: float
    dof: float
    p: float

    def text(self, sizes: tuple[int, int]) -> str:
        return f"Welch's t = {self.t:.2f}, p = {self.p:.2g}, {sizes[0]} and {sizes[1]} seeds"


def welch(a: list[float], b: list[float]) -> Welch | None:
    """Welch's t test of mean(a) - mean(b); None with fewer than 2 values on a side, or
    no spread on either (then no test is possible, and the means are the figures)."""
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / (len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / (len(b) - 1)
    se_a, se_b = var_a / len(a), var_b / len(b)
    if se_a + se_b == 0:
        return None
    t = (mean_a - mean_b) / math.sqrt(se_a + se_b)
    dof = (se_a + se_b) ** 2 / (se_a ** 2 / (len(a) - 1) + se_b ** 2 / (len(b) - 1))
    return Welch(t, dof, _t_two_sided_p(t, dof))


def _t_two_sided_p(t: float, dof: float) -> float:
    """P(|T| >= |t|) for Student's t with `dof` degrees of freedom: the regularized
    incomplete beta I_x(dof/2, 1/2) at x = dof / (dof + t^2)."""
    return _incomplete_beta(dof / (dof + t * t), dof / 2, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (Lentz's method; Press et al., Numerical Recipes, 6.4)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1 - x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _incomplete_beta(1 - x, b, a)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction / a


def seeds_text(count: int) -> str:
    """How many replicas stand behind a cell's numbers: "mean of 3 seeds" or "1 seed"."""
    count = int(count)
    return f"mean of {count} seeds" if count > 1 else "1 seed"


def acc_seeds_text(row: pd.Series) -> str:
    """`seeds_text` for an accuracy, naming the seeds that did not learn: "mean of 3
    seeds, 1 of which did not learn" (or "1 seed, which did not learn")."""
    return learned_seeds_text(row["seeds"], row.get("not_learned", 0))


def learned_seeds_text(count: int, not_learned: int | None) -> str:
    """`acc_seeds_text` from a cell's seed count and how many of them did not learn."""
    text, failed = seeds_text(count), int(not_learned or 0)
    if not failed:
        return text
    return (f"{text}, which did not learn" if int(count) == 1
            else f"{text}, {failed} of which did not learn")


def counted(count, noun: str) -> str:
    """"1 pair", "3 pairs": a count and its noun, in the number the count takes."""
    return f"{int(count)} {noun}" if int(count) == 1 else f"{int(count)} {noun}s"


def percent(fraction: float) -> str:
    return f"{fraction:.0%}" if abs(fraction) >= 0.1 else f"{fraction:.1%}"


def part_trials(summary: pd.DataFrame, part: str) -> pd.DataFrame:
    """The trials made for `part` by the exercises study, failed ones left out; in a
    sweep whose trials carry no part (a plain grid, the quickstart), those whose
    configuration is the part's."""
    usable = summary[summary["status"] != Status.FAILED]
    # trials.csv read back holds no part as NaN (a float column when no trial has one)
    parts = usable["part"].astype(object).fillna("")
    if (parts != "").any():
        return usable[parts == part]
    return _matching(usable, part)


def _matching(trials: pd.DataFrame, part: str) -> pd.DataFrame:
    """An untagged sweep's trials that do what the exercises study's `part` does. The
    parts but batch-lr keep one batch, lr, momentum and precision: the book's recipe
    where the sweep ran it, else its first trial's."""
    if trials.empty:
        return trials
    plain = ((trials["split"] == "even") & (trials["straggler_slowdown"] == 1)
             & (trials["threads_per_worker"] == 1) & (trials["warmup_epochs"] == 0)
             & (trials["model"] == "lenet"))
    book = trials[trials["book_recipe"].astype(bool)] if "book_recipe" in trials else trials[:0]
    reference = (book if len(book) else trials).iloc[0]
    same = {key: trials[key] == reference[key]
            for key in ("batch_size", "base_lr", "momentum", "precision")}
    kept = same["batch_size"] & same["momentum"] & same["precision"]
    matches = {
        "batch-global": plain & (trials["batch_scaling"] == "global")
                        & (trials["sync"] == "scratch") & kept & same["base_lr"],
        "batch-lr": plain & (trials["batch_scaling"] == "per-worker")
                    & (trials["sync"] == "scratch") & kept,
        "strategies": plain & (trials["batch_scaling"] == "global")
                      & ~trials["sync"].isin(["scratch", "delayed"]) & kept & same["base_lr"],
        "split": (trials["straggler_slowdown"] > 1) & kept & same["base_lr"],
        "threads": (trials["num_workers"] == 1) & (trials["threads_per_worker"] > 1) & kept,
        "warmup": (trials["warmup_epochs"] > 0) & (trials["batch_scaling"] == "per-worker"),
        "resnet18": trials["model"] == "resnet18",
        "delayed": (trials["sync"] == "delayed") & kept,
    }
    return trials[matches[part]]


def timed(trials: pd.DataFrame) -> pd.DataFrame:
    """Those with at least one epoch timed, fewest workers first."""
    return trials.dropna(subset=["mean_epoch_time_s"]).sort_values("num_workers")


def cell(trials: pd.DataFrame) -> pd.Series | None:
    """Replicas of one configuration as one row: each measure the mean over seeds (trials
    of one seed averaged first), `seeds` their count; None for no trials."""
    if trials.empty:
        return None
    measures = [column for column in MEASURES if column in trials]
    per_seed = trials.groupby("seed")[measures].mean()
    row = trials.iloc[0].copy()
    row[measures] = per_seed.mean()
    row["seeds"] = len(per_seed)
    row["seed_accs"] = (tuple(per_seed["final_test_acc"].dropna())
                        if "final_test_acc" in per_seed else ())
    row["not_learned"] = int((~learned(trials).groupby(trials["seed"]).all()).sum())
    if "baseline_rate" in row and not pd.isna(row.get("epoch_s")):
        # The cell's own throughput and speedup, from its mean epoch: a speedup
        # printed beside the cell's and its baseline's epoch times is their ratio.
        row["samples_per_s"] = rate(row)
        if not pd.isna(row["speedup"]):
            row["speedup"] = row["samples_per_s"] / row["baseline_rate"]
            row["efficiency"] = row["speedup"] / row["num_workers"]
    return row


def cells(trials: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One `cell` per value of `keys`, in their order."""
    if trials.empty:
        return trials.assign(seeds=pd.Series(dtype=int))
    rows = [cell(group) for _, group in trials.groupby(keys, sort=True)]
    return pd.DataFrame(rows).reset_index(drop=True)


def rate(row: pd.Series) -> float:
    """A trial's or a cell's throughput in the timing window: its epoch's examples over `epoch_s`."""
    return row["steps_per_epoch"] * row["global_batch_size"] / row["epoch_s"]


def speedup_over(many: pd.Series, one: pd.Series) -> float:
    """`many`'s throughput over `one`'s: the ratio of the two epoch times printed
    beside it (each epoch the same examples, its steps of one global batch)."""
    shared = many.get("shared_gpu", False)
    if pd.notna(shared) and bool(shared):
        return math.nan  # workers that shared a GPU took turns on it
    return rate(many) / rate(one)


def with_speedups(table: pd.DataFrame, group: list[str]) -> pd.DataFrame:
    """A table of cells with each row's speedup and efficiency against the 1-worker
    row of its `group` in the same table (NaN without one): every speedup shown is
    the ratio of two epoch times shown."""
    # A fresh index: a table concatenated from two (13.5.1's arms) repeats its labels,
    # and one row's speedup written by label would land on the other arm's row too.
    table = table.reset_index(drop=True)
    for _, rows in table.groupby(group, sort=False, dropna=False):
        ones = rows[rows["num_workers"] == 1]
        for index, row in rows.iterrows():
            table.loc[index, "speedup"] = (speedup_over(row, ones.iloc[0]) if len(ones)
                                           else math.nan)
    table["efficiency"] = table["speedup"] / table["num_workers"]
    return table


def at_workers(trials: pd.DataFrame, num_workers: int) -> pd.Series | None:
    """The cell of `num_workers`' trials (replicas of one configuration), or None."""
    return cell(trials[trials["num_workers"] == num_workers])


def missing_part(parts: str, command: str = EXERCISES_COMMAND) -> str:
    return f"This sweep has no usable trials of part {parts}: `{command}` runs them."


def one_worker_count(trials: pd.DataFrame) -> str:
    counts = ", ".join(str(count) for count in sorted(trials["num_workers"].unique()))
    return (f"This sweep ran {counts} worker(s) only, and the answer needs two worker counts "
            f"or more: `{MORE_WORKERS_COMMAND}` runs 1, 2, 4, ... up to what the cluster "
            f"holds.")


def numbers(values) -> str:
    return ", ".join(f"{value:g}" for value in sorted(set(values)) if not math.isnan(value))
