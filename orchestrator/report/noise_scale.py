"""The gradient noise scale of a trial, from what its workers measured for free
(training/step_metrics.py, `GradientNoise`): McCandlish, Kaplan, Amodei et al. (2018),
"An Empirical Model of Large-Batch Training", appendix A.1.

A mean gradient over b examples has E|g_b|^2 = |G|^2 + tr(S)/b, for the true
gradient G and the per-example covariance S. Each worker's shard (b examples)
and the summed gradient (the global batch B) are two such measurements every
step; averaged over an epoch (numerator and denominator apart, as the paper
does) they give

    tr(S)  = (|g_b|^2 - |G_B|^2) / (1/b - 1/B)
    |G|^2  = (B |G_B|^2 - b |g_b|^2) / (B - b)
    B_simple = tr(S) / |G|^2,

the simple noise scale, which the paper found to predict the critical batch
size: below it a larger batch saves steps almost one for one, above it it
mostly spends more examples. Their model of the trade-off: reaching a given
loss takes (1 + B_noise/B) times the fewest steps and (1 + B/B_noise) times
the fewest examples.
"""

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from orchestrator.config.dataset import DataFacts

COLUMNS = ["grad_sq_shard", "grad_sq_batch", "noise_shard_examples"]


def per_trial(epochs: pd.DataFrame) -> pd.DataFrame:
    """Each measured trial's B_simple over its epochs after the first (the means of
    the two squared norms, then solved), and in its last epoch; NaN where the
    estimate is not positive (noise larger than the signal it measures)."""
    if not set(COLUMNS) <= set(epochs.columns):
        return pd.DataFrame(columns=["trial_id", "noise_scale", "noise_scale_last"])
    measured = epochs.dropna(subset=COLUMNS)
    rows = []
    for trial_id, history in measured.sort_values("epoch").groupby("trial_id"):
        steady = history[history["epoch"] > history["epoch"].min()] if len(history) > 1 \
            else history
        batch = float(history["global_batch_size"].iloc[0])
        rows.append({"trial_id": trial_id,
                     "noise_scale": simple(steady["grad_sq_shard"].mean(),
                                           steady["grad_sq_batch"].mean(),
                                           steady["noise_shard_examples"].mean(), batch),
                     "noise_scale_last": simple(*history[COLUMNS].iloc[-1], batch)})
    return pd.DataFrame(rows, columns=["trial_id", "noise_scale", "noise_scale_last"])


def simple(shard_sq: float, batch_sq: float, shard: float, batch: float) -> float:
    """B_simple from the mean squared norms at the shard's size and the batch's."""
    if not shard < batch:
        return math.nan
    trace = (shard_sq - batch_sq) / (1 / shard - 1 / batch)
    signal = (batch * batch_sq - shard * shard_sq) / (batch - shard)
    return trace / signal if trace > 0 and signal > 0 else math.nan


def examples_factor(batch: float, noise_scale: float) -> float:
    """(1 + B/B_noise): the examples a batch of B spends to reach a given loss, over
    the fewest any batch could (McCandlish et al., 2018, eq. 2.11)."""
    return 1 + batch / noise_scale


# A trial still on the loss plateau of a uniform guess (ln of the classes) has
# learned nothing: its gradient is tiny and its noise scale says nothing of training.
LEARNED_LOSS_FRACTION = 0.9
# ...and a test accuracy above chance's by half of it, at most 0.1 (0.15 of 10
# classes; 0.6 of 2, where 1.5 times chance would ask 0.75).
LEARNED_ACC_MARGIN = 0.1


def chance_margin(classes) -> "pd.Series | float":
    """How far above chance (1/classes) a test accuracy must be to count as learned."""
    return np.minimum(0.5 / classes, LEARNED_ACC_MARGIN)


def learned(summary: pd.DataFrame) -> pd.Series:
    """Trials whose final training loss fell below 90% of a uniform guess's and whose
    final test accuracy, where scored, rose above chance by `chance_margin` (a
    network whose training loss fell but whose test predictions are still chance's,
    as ResNet-18's BatchNorm after a few steps can leave it, learned nothing to compare);
    every trial where the sweep recorded no training loss (nothing to tell them by)."""
    if "final_train_loss" not in summary:
        return pd.Series(True, index=summary.index)
    # A trials.csv from before num_classes was recorded: Fashion-MNIST's.
    classes = summary["num_classes"] if "num_classes" in summary else DataFacts().num_classes
    fell = summary["final_train_loss"] < LEARNED_LOSS_FRACTION * np.log(classes)
    if "final_test_acc" not in summary:
        return fell
    above_chance = summary["final_test_acc"].isna() | (
        summary["final_test_acc"] > 1 / classes + chance_margin(classes))
    return fell & above_chance


def _measured(summary: pd.DataFrame, model: str | None) -> pd.DataFrame:
    """The trials that measured a noise scale and learned: `model`'s where there are
    some, else every one."""
    if "noise_scale_last" not in summary:
        return summary[:0]
    measured = summary.dropna(subset=["noise_scale_last"])
    measured = measured[learned(measured)]
    if model is not None and (measured["model"] == model).any():
        measured = measured[measured["model"] == model]
    return measured


# The noise scales a range of epochs is read from: those measured at a train loss
# within this fraction above the lowest (the loss the figure is for). The noise scale
# grows as the loss falls (McCandlish et al., 2018): a grading found the range reaching
# down to a 2-epoch trial's value at 3.7 times the loss.
NEAR_LOSS = 0.10


class EpochsFactor(NamedTuple):
    """The larger of two global batches' epochs over the smaller's to reach the same
    loss, by McCandlish et al.'s model: at the noise scale of the most trained trial
    (`latest`: the noise scale grows as the loss falls), and at the largest, smallest
    and median of the values measured near its loss (`NEAR_LOSS`; `near` of them)."""

    factor: float
    low: float
    high: float
    median: float
    latest: pd.Series
    stand_in: bool
    """Whether the model asked about measured none: another model's stands in."""
    near: int = 1
    """The distinct values measured near `latest`'s loss, the range's."""


def epochs_factor(summary: pd.DataFrame, batches: tuple[int, int],
                  model: str | None = None) -> EpochsFactor | None:
    """`EpochsFactor` of `batches` from `model`'s trials that measured a noise scale
    and learned, else every such trial's; None where there is none."""
    measured = _measured(summary, model)
    if measured.empty:
        return None
    small, large = batches

    def more(noise_scale: float) -> float:
        return examples_factor(large, noise_scale) / examples_factor(small, noise_scale)

    latest = measured.sort_values("final_train_loss").iloc[0]
    values = measured.loc[measured["final_train_loss"]
                          <= latest["final_train_loss"] * (1 + NEAR_LOSS),
                          "noise_scale_last"].drop_duplicates()
    return EpochsFactor(more(float(latest["noise_scale_last"])), more(values.max()),
                        more(values.min()), more(values.median()), latest,
                        model is not None and model not in set(measured["model"]), len(values))


def large_batch_text(summary: pd.DataFrame, batches: tuple[int, int],
                     model: str | None = None) -> str | None:
    """What the measured noise scale says of a larger global batch's cost in epochs:
    `batches` (a batch the sweep ran, the larger one asked about), from `model`'s
    trials that learned where there are some, else from every measured trial that
    learned (the text names which); None where none did."""
    measured, epochs = _measured(summary, model), epochs_factor(summary, batches, model)
    if epochs is None:
        return None
    models = ", ".join(sorted(measured["model"].unique()))
    unmeasured = (f"; {model}'s trials did not learn enough to measure it"
                  if epochs.stand_in else "")
    latest = epochs.latest
    estimate = float(latest["noise_scale_last"])
    small, large = batches
    # Trials that ran the same optimizer from the same seed (strategies that sum
    # alike) measure one value: counted once.
    values = measured["noise_scale_last"].drop_duplicates()
    repeated = (f" ({len(values)} distinct: trials of one optimizer and seed measure one "
                f"value)" if len(values) < len(measured) else "")
    others = (f"; the {len(measured)} measured trials that learned{repeated}: median "
              f"{values.median():.3g}, from {values.min():.3g} to {values.max():.3g}"
              if len(values) > 1 else "")
    spread = (f" ({format_factor(epochs.low)}x to {format_factor(epochs.high)}x over the "
              f"{epochs.near} values measured within {NEAR_LOSS:.0%} of this loss, "
              f"{format_factor(epochs.median)}x at their median: which value is taken moves "
              f"the figure within that)" if epochs.near > 1 else "")
    return (f"How a larger batch trains, measured: the gradient noise scale (McCandlish et "
            f"al., 2018), read for free from each worker's shard gradient and their sum, is "
            f"B_simple = {estimate:.3g} examples in the last epoch of trial "
            f"`{latest['trial_id']}` ({latest['model']}, global batch "
            f"{int(latest['global_batch_size'])}, train loss "
            f"{latest['final_train_loss']:.2f}, the lowest of the {models} trials that "
            f"measured it{unmeasured}{others}). Their experiments found it near the "
            f"critical batch, within an order of magnitude: below it a larger batch saves "
            f"steps almost one for one, above it mostly spends examples. By their model, "
            f"reaching a given loss takes (1 + B/B_noise) times the fewest examples any batch "
            f"could: {format_factor(examples_factor(small, estimate))}x at global batch "
            f"{small}, {format_factor(examples_factor(large, estimate))}x at {large}, so about "
            f"{format_factor(epochs.factor)}x the epochs of batch {small}{spread} to reach this "
            f"loss at {large}, the lr re-tuned for the batch as Goyal et al. (2017) do. A "
            f"what-if from their model and these short runs: the noise scale grows as the "
            f"loss falls, so longer training pays less for the larger batch than this.")


def format_factor(value: float) -> str:
    """A ratio to two significant digits, as the estimate behind it supports: 2.0, 17."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"
