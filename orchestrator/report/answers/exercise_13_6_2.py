"""13.6.2, devices of different speed, answered from a sweep (sheet.py renders
it): an even and a proportional split of the global batch with one worker
slowed, against the same workers without the straggler, the fast worker alone
and the ideal split for the speeds measured."""

import pandas as pd

from orchestrator.records import counted, seconds_text
from orchestrator.report.answers.cells import (at_workers, part_trials, shares_gpu, sync_seconds,
                                               timed)
from orchestrator.report.answers.compare import compare_times, ratio_text, times_differ
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.sides import Side, sides_of
from orchestrator.report.answers.wording import in_short, missing_part, percent, seeds_text
from orchestrator.report.summary import per_worker_text, per_worker_values
from orchestrator.report.tables import markdown_table


def answer_13_6_2(summary: pd.DataFrame, epochs: pd.DataFrame, noise: Noise,
                  use_gpu: bool = False) -> list[str]:
    split = timed(part_trials(summary, "split"))
    even, proportional = (split[split["split"] == name] for name in ("even", "proportional"))
    if even.empty or proportional.empty:
        return [missing_part("split")]
    even, proportional = even.iloc[0], proportional.iloc[0]
    k, slowdown = proportional["num_workers"], proportional["straggler_slowdown"]
    unslowed = timed(part_trials(summary, "batch-global"))
    unslowed = unslowed[(unslowed["straggler_slowdown"] == 1.0)
                        & (unslowed["global_batch_size"] == proportional["global_batch_size"])]
    plain, alone = at_workers(unslowed, k), at_workers(unslowed, 1)
    if shares_gpu(proportional):
        alone = None  # workers taking turns on one GPU: no time against one device's
    even_last, proportional_last = (_last_epoch(epochs, trial["trial_id"])
                                    for trial in (even, proportional))
    # Workers taking turns on one GPU: an ideal split of two devices' speeds is no
    # device's (the work on the one GPU is the same however it is split).
    ideal_s = None if shares_gpu(even) else _ideal_epoch_s(even_last)
    # Every time from the one window (each trial's epochs after the first, which a
    # proportional split spends even before it re-sets its shares), the trials
    # without a straggler averaged over their seeds as every cell is.
    rows = [("even, straggler", even, even_last),
            ("proportional, straggler", proportional, proportional_last),
            ("even, no straggler", plain, None), ("the fast worker alone", alone, None)]
    table = pd.DataFrame([{"setup": setup, "epoch_s": row["epoch_s"],
                           "seeds": int(row.get("seeds", 1)),
                           "last_epoch_shares": _joined(last if last is not None else
                                                        _last_epoch(epochs, row["trial_id"]),
                                                        "worker_shares", "g"),
                           "last_epoch_compute_s": _joined(last, "worker_compute_s", ".2f")}
                          for setup, row, last in rows if row is not None])
    if ideal_s is not None:
        table.loc[len(table)] = ["ideal for the even trial's measured speeds", ideal_s, 1, "",
                                 ""]
    even_s, proportional_s = even["epoch_s"], proportional["epoch_s"]
    pair = sides_of(proportional, even)
    # The ideal is reckoned from the even trial's speeds: its side is that trial's, its
    # seeds the even trial's (matched seed for seed as the even trial would be).
    derived = ((pair[0], Side(pair[1].trials, pair[1].single_epoch,
                              tuple((seed, ideal_s) for seed, _ in pair[1].by_seed)))
               if ideal_s is not None else pair)
    shares = _joined(proportional_last, "worker_shares", "g")
    sentences = [
        f"With the last of {k} workers slowed {slowdown:g}x (one trial each, seed "
        f"{int(even['seed'])}; epochs after the first, as everywhere: a proportional split "
        f"starts even and re-sets its shares after its first epoch), an even split of the "
        f"global batch of {proportional['global_batch_size']} took {seconds_text(even_s)} s per "
        f"epoch "
        f"and the proportional split {seconds_text(proportional_s)} s: proportional was "
        f"{compare_times(proportional_s, even_s, noise, pair)} even"
        + (f"; without the straggler the same {k} workers took {seconds_text(plain['epoch_s'])} s "
           f"({seeds_text(plain['seeds'])})." if plain is not None else ".")]
    if shares:
        sentences.append(f"The proportional split settled on shares {shares} (examples per "
                         f"step), set from each worker's examples per second of forward and "
                         f"backward in the epoch before.")
    if ideal_s is not None:
        sentences.append(f"For the speeds the even trial measured, the ideal split would take "
                         f"{seconds_text(ideal_s)} s ({even_s / ideal_s:.2f}x faster than "
                         f"even); the "
                         f"proportional split's {seconds_text(proportional_s)} s is "
                         f"{_against_ideal(proportional_s, ideal_s, noise, derived)}.")
    if alone is not None:
        alone_s = alone["epoch_s"]
        with_straggler = [compare_times(arm["epoch_s"], alone_s, noise, sides_of(arm, alone))
                          for arm in (even, proportional)]
        sentences.append(
            f"Is the slow device worth having at all? The fast worker alone took "
            f"{seconds_text(alone_s)} s "
            f"per epoch ({seeds_text(alone['seeds'])}; the whole global batch, no sum): the "
            f"even split with the straggler was {with_straggler[0]} it, the proportional "
            f"split {with_straggler[1]} it.")
        if int(k) == 2:
            sentences.append(_helper_bound(alone, proportional, even_last, slowdown, noise))
    sentences.append(_emulated(slowdown, use_gpu, shares_gpu(even)))
    sentences.append(_worth_it(proportional, even, alone, noise) + (
        "Any split trains the same model: each worker's loss is divided by the global "
        "batch, not its own share, so the summed gradient is one device's over the whole "
        "batch, the same examples in the same order (in float64 the parameters are one "
        "device's: tests/processes/test_split_on_processes.py)"
        + ("" if even["model"] in NO_BATCHNORM else
           f" where the model has no BatchNorm, or its statistics are synchronised "
           f"(`--sync-batchnorm`): else each worker normalises by its own slice's, and "
           f"{even['model']}'s splits differ by more than rounding")
        + "; in float32 a sum divided otherwise rounds otherwise, and training carries that "
          "on. " + _same_optimizer(summary, even, proportional) + "With a GPU and a CPU "
        "of very different speed, an even split makes the GPU wait for the CPU at every step; "
        "the proportional split gives each its share, but the gain is bounded by the slow "
        "device's share of the work, and its costs are re-timing every device and "
        "re-splitting the batch, the gradients crossing between GPU and CPU at every sum, "
        "and the CPU's own share slowing it as the GPU's host (its data loading and kernel "
        "launches): two workers sharing a node, as here, slow each other. "
        + _gpu_and_cpu_bound()))
    short = (f"Divide each step's batch in proportion to each device's measured speed. Beside "
             f"a worker slowed {slowdown:g}x that split's epochs were "
             f"{ratio_text(proportional_s, even_s, noise, pair)} an even split's")
    if alone is not None:
        alone_s = alone["epoch_s"]
        beside = ratio_text(proportional_s, alone_s, noise, sides_of(proportional, alone))
        short += f", and {beside} the fast worker's alone"
    short += (". Worth it while the slow device adds a good part of the fast one's speed: its "
              "share bounds the gain, and the split costs re-timing every device, the gradients "
              "crossing between the devices at every sum and, where the CPU also hosts the GPU, "
              "its own work slowing the GPU's feeding.")
    return [in_short(short), markdown_table(table), " ".join(sentences)]


def _emulated(slowdown: float, use_gpu: bool, shared: bool) -> str:
    """How the straggler is emulated on these workers (training/timing.py)."""
    if not use_gpu:
        return (f"The straggler is emulated: the last worker stays busy on its core until "
                f"its forward and backward have taken {slowdown:g}x their time, as a slower "
                f"CPU would compute (a sleep would hand its core to the other worker).")
    text = (f"The straggler is emulated: once its forward and backward have run, the last "
            f"worker's host waits idle until they have taken {slowdown:g}x their time, as it "
            f"would for a slower GPU.")
    if shared:
        text += (" Here the two workers shared one GPU, so that wait handed the GPU to the "
                 "other worker: the splits' times are of one device's work divided two ways, "
                 "and no ideal split of two devices' speeds is reckoned.")
    return text


def _worth_it(proportional: pd.Series, even: pd.Series, alone: pd.Series | None,
               noise: Noise) -> str:
    """The exercise's "is it worth the effort?": whether the two devices, the batch
    split by their speeds, beat the fast one alone beyond the noise (the effort is
    using the slow one at all); without a trial of the fast one alone, only whether
    splitting by speed beat an even split, and that the rest is not measured."""
    if alone is None:
        ahead = times_differ(proportional["epoch_s"], even["epoch_s"], noise,
                             sides_of(proportional, even)) < 0
        why = ("workers taking turns on one GPU cannot tell" if shares_gpu(proportional) else
               "no trial of the fast one alone measured")
        return ("Splitting by speed beat the even split beyond the noise here" if ahead else
                "Splitting by speed did not beat the even split beyond the noise here") + (
            f"; whether the slow device is worth having at all, {why}. ")
    ahead = times_differ(proportional["epoch_s"], alone["epoch_s"], noise,
                         sides_of(proportional, alone)) < 0
    return ("Worth it here: the devices together, the batch split by their speeds, beat the fast "
            "one alone beyond the noise. " if ahead else
            "Not worth it here: the devices together, the batch split by their speeds, did not beat "
            "the fast one alone beyond the noise. ")


# A helper r times slower adds at most 1/r of the fast device's speed (`_helper_bound`):
# these slowdowns put a GPU against its host's CPU, a what-if printed as one.
CPU_SLOWDOWNS = (10, 50)


def _gpu_and_cpu_bound() -> str:
    """The bound 1 + 1/r at a CPU r times slower than its GPU, for the exercise's GPU
    and CPU (a what-if: no GPU ran beside a CPU here)."""
    low, high = CPU_SLOWDOWNS
    return (f"A what-if for the exercise's GPU and CPU, none of which ran here: a CPU {low} "
            f"to {high} times slower than its GPU on the same model would make the pair at "
            f"best {1 + 1 / low:.2f}x as fast as the GPU alone ({1 + 1 / high:.2f}x at {high} "
            f"times), were the split and the sums free, and the sums' cost across the two and "
            f"the host's own work beside them can take that back: rarely worth the effort.")


def _helper_bound(alone: pd.Series, proportional: pd.Series, even_last: pd.Series | None,
                  slowdown: float, noise: Noise) -> str:
    """What a helper 1/`slowdown` as fast can give the fast worker at most (its speed
    added, were the split and the sum free), what the proportional split reached
    (seed for seed where the two share seeds, as compared above), and what took the
    rest: the sums, and the fast worker's own compute beside the straggler against
    half its epoch alone (an upper bound of its compute alone: at least that slower)."""
    test = noise.time_spread.test(proportional["epoch_s"], alone["epoch_s"],
                                  sides_of(proportional, alone))
    times = ((test.time_s, test.other_s) if test is not None
             else (proportional["epoch_s"], alone["epoch_s"]))
    best, reached = 1 + 1 / slowdown, times[1] / times[0]
    text = (f"A helper {slowdown:g}x slower adds at most 1/{slowdown:g} of the fast worker's "
            f"speed: at best an epoch {best:.2f}x faster than the fast worker alone, were the "
            f"split and the sum free; the proportional split reached {reached:.2f}x")
    if reached >= best:
        return text + ": all of it."
    sync_s = sync_seconds(proportional)
    rest = ([f"its time in sync, the sums and the waits for the other worker inside them "
             f"({seconds_text(sync_s, 2)} s an epoch)"] if sync_s > 0 else [])
    compute = (per_worker_values(even_last.get("worker_compute_s"))
               if even_last is not None else None)
    if compute is not None and len(compute) == 2 and compute[0] > times[1] / 2:
        half = times[1] / 2
        rest.append(f"the fast worker itself, which beside the straggler computed its half of "
                    f"the even split's batch in {compute[0]:.2f} s an epoch, "
                    f"{percent(compute[0] / half - 1)} or more longer than half its epoch "
                    f"alone ({seconds_text(half, 2)} s), the two workers sharing one node")
    return text + (f"; the rest went to {' and to '.join(rest)}." if rest else ".")


# Trials of one optimizer in exact arithmetic: these settings equal, whatever the worker
# count, split, threads, straggler or sync strategy (but delayed's, a step late), for a
# model without BatchNorm (a review: its per-worker statistics make the splits differ).
_SAME_OPTIMIZER = ("model", "dataset", "seed", "global_batch_size", "lr", "momentum",
                   "warmup_epochs", "warmup_start_lr", "num_epochs", "epochs_run", "precision",
                   "train_limit", "test_limit")
# The book's models without BatchNorm; a model of your own is not assumed to be one.
NO_BATCHNORM = ("lenet",)


def _same_optimizer(summary: pd.DataFrame, even: pd.Series, proportional: pd.Series) -> str:
    """The two arms' accuracies, against the sweep's other trials of the same optimizer
    in exact arithmetic (a grading read 0.697 against 0.659 as a gap the sheet never
    named): how far float32's rounding alone moves the accuracy after these epochs.
    Empty where an arm has no accuracy; without such trials, the two alone."""
    accs = [arm.get("final_test_acc") for arm in (even, proportional)]
    if any(acc is None or pd.isna(acc) for acc in accs) or even["model"] not in NO_BATCHNORM:
        return ""
    same = summary[(summary["sync"] != "delayed")
                   & ~summary["trial_id"].isin([even["trial_id"], proportional["trial_id"]])]
    for column in _SAME_OPTIMIZER:
        if column in summary:  # NaN (unset) matches NaN
            same = same[(same[column] == even[column])
                        | (same[column].isna() & pd.isna(even[column]))]
    same = same.dropna(subset=["final_test_acc"])
    text = (f"Here, after {int(even['epochs_run'])} epochs, the even split reached "
            f"{accs[0]:.3f} and the proportional {accs[1]:.3f} (seed {int(even['seed'])}, one "
            f"trial each)")
    if same.empty:
        return text + ": float32's part in that gap, this sweep ran no other trial to tell. "
    low, high = same["final_test_acc"].min(), same["final_test_acc"].max()
    inside = all(low - 1e-9 <= acc <= high + 1e-9 for acc in accs)
    # Trials that round alike end alike (2 workers' sums of two are the same whatever the
    # strategy): the distinct results are the roundings seen (a grading).
    distinct = same["final_test_acc"].round(6).nunique()
    return (text + f"; the sweep's {len(same)} other trials of the same optimizer in exact "
            f"arithmetic (the same seed, global batch, lr and epochs, on other worker counts, "
            f"threads or exact strategies; {counted(distinct, 'distinct result')}, trials "
            f"that round alike ending alike) ended between {low:.3f} and {high:.3f}: "
            + ("float32's rounding alone moves this accuracy that far, so the gap between the "
               "splits is no finding about them. " if inside else
               "an arm outside that range differs by more than float32's rounding has shown "
               "here. "))


def _last_epoch(epochs: pd.DataFrame, trial_id: str, up_to: float = float("inf")
                ) -> pd.Series | None:
    history = epochs[(epochs["trial_id"] == trial_id) & (epochs["epoch"] <= up_to)
                     ].sort_values("epoch")
    return None if history.empty else history.iloc[-1]


def _against_ideal(time_s: float, ideal_s: float, noise: Noise, sides) -> str:
    """How a measured epoch stands to the ideal reckoned from another trial's speeds:
    not a second trial to test against, so its gap with the 95% interval the sweep's
    time spread gives it ("2.8% above that (95% interval: 4.1% below to 10% above)");
    where the sweep has no test, as `compare_times` says it."""
    test = noise.time_spread.test(time_s, ideal_s, sides)
    if test is None:
        return f"{compare_times(time_s, ideal_s, noise, sides)} that"
    low, high = (ratio - 1 for ratio in test.ratio_interval())
    gap = test.time_s / test.other_s - 1  # the times the interval is of
    return (f"{percent(abs(gap))} {'above' if gap >= 0 else 'below'} that (95% interval: "
            f"{_signed(low)} to {_signed(high)})")


def _signed(fraction: float) -> str:
    return f"{percent(abs(fraction))} {'above' if fraction >= 0 else 'below'}"


def _joined(epoch: pd.Series | None, column: str, spec: str) -> str:
    return per_worker_text(epoch[column], spec) if epoch is not None and column in epoch else ""


def _ideal_epoch_s(last: pd.Series | None) -> float | None:
    """An epoch with its compute re-divided by measured speed: each worker's
    examples per second from its share and seconds, the rest of the epoch kept."""
    shares = per_worker_values(last["worker_shares"]) if last is not None else None
    compute_s = per_worker_values(last["worker_compute_s"]) if last is not None else None
    if not shares or not compute_s:
        return None
    speeds = [share / seconds for share, seconds in zip(shares, compute_s)]
    return last["epoch_time_s"] - max(compute_s) + sum(shares) / sum(speeds)
