"""fp16's dynamic loss scale (training/loss_scale.py): the rule itself, and the loop
in one process, whose overflows are skipped, whose scale a checkpoint keeps, and
whose blown-up run still ends diverged. Across workers: tests/processes/
test_fp16_loss_scale.py."""

import math

import pytest
import torch
from torch.nn import functional as F

from helpers import ONE_LAYOUT, train_reporting
from orchestrator.config.options import TrainConfig
from orchestrator.records import Status, epoch_line
from orchestrator.training import loss_scale
from orchestrator.training.recipe import make_optimizer
from orchestrator.training.models import build_model
from orchestrator.training.step import micro_slices, to_model_input
from orchestrator.training.loss_scale import GROWTH_INTERVAL, MIN_SCALE, LossScale



def _step(scale: LossScale, overflowed: bool) -> bool:
    """One backward at the scale, and its sum judged at once (every strategy but delayed)."""
    scale.record()
    if overflowed:
        return scale.skip()
    scale.stepped()
    return True


def test_an_overflow_halves_the_scale_and_finite_steps_double_it():
    scale = LossScale()
    assert scale.scale == 2.0 ** 16  # torch.amp.GradScaler's default
    assert _step(scale, overflowed=True) and scale.scale == 2.0 ** 15
    for _ in range(GROWTH_INTERVAL - 1):
        _step(scale, overflowed=False)
    assert scale.scale == 2.0 ** 15
    _step(scale, overflowed=False)
    assert scale.scale == 2.0 ** 16 and scale.good_steps == 0
    _step(scale, overflowed=False)
    assert _step(scale, overflowed=True) and scale.good_steps == 0  # the count starts again
    assert LossScale(scale.state_dict()).state_dict() == {
        "scale": 2.0 ** 15, "good_steps": 0, "skipped_steps": 2}


def test_an_overflow_at_the_least_scale_is_divergence():
    scale = LossScale({"scale": 2 * MIN_SCALE})
    assert _step(scale, overflowed=True) and scale.scale == MIN_SCALE
    assert not _step(scale, overflowed=True)


def test_delayed_s_two_overflows_at_one_scale_halve_it_once():
    """`delayed` judges a sum a step late, after the next backward ran at the same
    scale: both overflow, both are skipped, and the scale is halved once, as one
    overflow halves it on the other strategies."""
    scale = LossScale()
    scale.record()  # step t's backward
    scale.record()  # step t+1's, before step t's sum is judged
    assert scale.skip() and scale.scale == 2.0 ** 15
    scale.record()  # step t+2's, at the halved scale
    assert scale.skip() and scale.scale == 2.0 ** 15  # step t+1's: taken before the halving
    assert scale.skip() and scale.scale == 2.0 ** 14  # step t+2's: at the halved one
    assert scale.skipped_steps == 3


def test_unscaling_is_exact():
    grads = [torch.randn(100), torch.randn(3, 3)]
    scaled = [grad * 2.0 ** 16 for grad in grads]
    LossScale().unscale_(scaled)
    assert all(torch.equal(got, want) for got, want in zip(scaled, grads))


def test_overflows_are_skipped_and_a_resumed_run_keeps_the_scale(fashion_mnist_small,
                                                                  monkeypatch):
    # Started at 2^30, LeNet's float16 backward overflows until the scale is down
    # to where it does not (2^20 or so): those steps are skipped, and the run goes on.
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", 2.0 ** 30)
    config = TrainConfig(global_batch_size=32, lr=0.1, momentum=0.9, num_epochs=2,
                         train_limit=512, test_limit=100, precision="fp16", **ONE_LAYOUT)
    history, full = train_reporting(config, fashion_mnist_small)
    first = history[0]
    assert first["status"] == history[1]["status"] == Status.OK
    assert 5 <= first["skipped_steps"] < config.steps_per_epoch
    assert first["loss_scale"] == 2.0 ** 30 / 2 ** first["skipped_steps"]
    # Near the scale where float16 overflows, a later batch may overflow once more.
    skipped = first["skipped_steps"] + history[1]["skipped_steps"]
    assert history[1]["skipped_steps"] <= 2
    assert history[1]["loss_scale"] == 2.0 ** 30 / 2 ** skipped  # under 2000 steps: no growth
    assert all(math.isfinite(row["train_loss"]) for row in history)  # learns: test_worker_loop
    # train.py's line for the epoch says so.
    assert epoch_line(first, 2).endswith(
        f", loss scale {first['loss_scale']:g} ({first['skipped_steps']} skipped)")
    assert full[-1][1]["loss_scale"]["skipped_steps"] == skipped
    # The checkpoint keeps the scale: the resumed run skips what the uninterrupted
    # run's second epoch skipped, and ends bit for bit where it ended.
    _, partial = train_reporting(TrainConfig(**{**config.to_dict(), "num_epochs": 1}),
                                 fashion_mnist_small)
    _, state, first_history, evaluations = partial[-1]
    _, resumed = train_reporting(config, fashion_mnist_small,
                                 resume_from=(state, first_history, evaluations))
    assert resumed[-1][0]["skipped_steps"] == history[1]["skipped_steps"]
    assert resumed[-1][1]["loss_scale"] == full[-1][1]["loss_scale"]
    for name, tensor in full[-1][1]["model"].items():
        assert torch.equal(tensor, resumed[-1][1]["model"][name]), name


def _grad_scaler_reference(config: TrainConfig, dataset, initial_scale: float,
                           growth_interval: int) -> tuple[dict, float]:
    """The loop's batches (same shuffle) trained by plain torch: float16 autocast
    and torch.amp.GradScaler, with the loop's SGD; the weights and the final scale.
    With `config.accumulation_steps`, torch's recipe for gradient accumulation: each
    micro-batch's scaled loss backward, then one step and one update of the scale."""
    model = build_model(config.model, seed=config.seed)
    optimizer = make_optimizer(model.parameters(), config)
    scaler = torch.amp.GradScaler("cpu", init_scale=initial_scale,
                                  growth_interval=growth_interval)
    images = torch.from_numpy(dataset.train_images)
    labels = torch.from_numpy(dataset.train_labels).long()
    batch = config.global_batch_size
    for epoch in range(config.num_epochs):
        order = torch.randperm(config.num_train_examples, generator=torch.Generator().manual_seed(
            config.seed * 10_007 + epoch))
        for step in range(config.steps_per_epoch):
            whole = order[step * batch:(step + 1) * batch]
            for micro in micro_slices(batch, config.accumulation_steps):
                index = whole[micro]
                with torch.autocast("cpu", dtype=torch.float16):
                    logits = model(to_model_input(images[index]))
                loss = F.cross_entropy(logits.float(), labels[index],
                                       reduction="none").sum() / batch
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    return model.state_dict(), scaler.get_scale()


@pytest.mark.parametrize("accumulation_steps", [1, 3])
def test_one_worker_follows_torchs_grad_scaler(fashion_mnist_small, monkeypatch,
                                               accumulation_steps):
    # From 2^30 the first steps overflow and halve the scale; every 4 finite steps
    # double it, and the next overflow halves it again: both rules, many times.
    # Accumulated: a step is skipped where any of its micro-batches overflowed.
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", 2.0 ** 30)
    monkeypatch.setattr(loss_scale, "GROWTH_INTERVAL", 4)
    config = TrainConfig(global_batch_size=32, lr=0.1, momentum=0.9, num_epochs=2,
                         train_limit=512, test_limit=100, precision="fp16",
                         accumulation_steps=accumulation_steps, **ONE_LAYOUT)
    history, reports = train_reporting(config, fashion_mnist_small)
    weights, scale = _grad_scaler_reference(config, fashion_mnist_small, 2.0 ** 30, 4)
    assert history[-1]["loss_scale"] == scale
    # Measured: 11 and 3 skipped, ending at 2^19 (the second epoch's are the doubled
    # scale overflowing again).
    assert history[0]["skipped_steps"] >= 10 and history[1]["skipped_steps"] >= 1
    for name, tensor in reports[-1][1]["model"].items():
        assert torch.equal(tensor, weights[name]), name


def test_delayed_counts_each_applied_sum_once(fashion_mnist_small, monkeypatch):
    """An epoch's first step of `delayed` applies no sum: it is no finite step of the
    scale's count. 16 steps an epoch apply 16 sums (15, and the drain's)."""
    monkeypatch.setattr(loss_scale, "INITIAL_SCALE", 2.0 ** 8)  # no overflow
    config = TrainConfig(global_batch_size=32, lr=0.1, num_epochs=1, sync="delayed",
                         train_limit=512, test_limit=100, precision="fp16", **ONE_LAYOUT)
    history, reports = train_reporting(config, fashion_mnist_small)
    assert history[0]["skipped_steps"] == 0
    assert reports[-1][1]["loss_scale"]["good_steps"] == config.steps_per_epoch == 16


@pytest.mark.reliability(fault="a learning rate that diverges in fp16 (lr 50)",
                         lost="nothing: its overflows are skipped until the scale reaches 1, "
                              "then the run is marked diverged")
def test_a_run_that_blows_up_in_fp16_still_ends_diverged(fashion_mnist_small):
    config = TrainConfig(global_batch_size=32, lr=50.0, num_epochs=2, train_limit=2048,
                         test_limit=100, precision="fp16", **ONE_LAYOUT)
    history, _ = train_reporting(config, fashion_mnist_small)
    assert history[-1]["status"] == Status.DIVERGED
    assert len(history) == 1  # it stopped in its first epoch
    # Halved from 2^16 to 1 by 16 skips; the 17th found nothing left to halve.
    assert history[-1]["loss_scale"] == MIN_SCALE and history[-1]["skipped_steps"] == 17
