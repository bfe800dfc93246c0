"""The training loop in one process (world size 1): no Ray, real data."""

import dataclasses
import math
import platform
import subprocess
import sys

import pytest
import torch

from orchestrator.training import loop, step, step_metrics
from orchestrator.config.options import TrainConfig
from orchestrator.records import Status
from orchestrator.training.loop import DIVERGED_LOSS_FACTOR, run_training
from orchestrator.training.models import build_model
from orchestrator.training.sync.base import group_transport
from orchestrator.training.sync.strategies import BucketedSync
from helpers import ONE_LAYOUT, REPO, train_reporting

CPU = torch.device("cpu")


def test_learns_on_real_data(fashion_mnist_small):
    config = TrainConfig(global_batch_size=32, lr=0.2, num_epochs=2, train_limit=8192, test_limit=1000)
    history, _ = train_reporting(config, fashion_mnist_small)
    assert [row["epoch"] for row in history] == [1, 2]
    assert history[-1]["test_acc"] > 0.5  # chance is 0.1
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    row = history[-1]
    assert row["steps_per_epoch"] == 256 and row["global_batch_size"] == 32
    assert row["samples_per_s"] == pytest.approx(256 * 32 / row["epoch_time_s"])
    assert row["worker_nodes"] == str([platform.node()])  # no Ray node: the machine's name


@pytest.mark.parametrize("options", [{"precision": "bf16", "memory_format": "nchw"},
                                     {"precision": "fp16", "memory_format": "nchw"},
                                     {"memory_format": "channels-last"}])
def test_bf16_fp16_and_channels_last_learn_on_cpu(fashion_mnist_small, options):
    # Momentum leaves LeNet's initial plateau in a quarter of test_learns_on_real_data's
    # images: 256 steps of 16 reached test accuracy 0.44 in bf16 with torch's
    # AVX-512 kernels and 0.63 with its AVX2 ones (they round differently), 0.62 in
    # fp32; 0.61 in fp16 (one step skipped by its loss scale). bf16 and fp16 run several
    # times slower than fp32 on a CPU without AVX-512.
    config = TrainConfig(global_batch_size=16, lr=0.05, momentum=0.9, num_epochs=1,
                         train_limit=4096, test_limit=1000, **options)
    history, reports = train_reporting(config, fashion_mnist_small)
    assert history[-1]["test_acc"] > 0.3  # chance is 0.1
    assert history[-1]["train_loss"] < 0.95 * math.log(10)  # chance's loss is ln 10
    assert history[-1]["precision"] == config.precision
    weights = reports[-1][1]["model"]
    # Autocast computes in bfloat16 (float16) but the weights it updates stay fp32.
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
    conv_weight = weights["3.weight"]  # 50 x 20 x 5 x 5 (the first conv's one channel has no layout)
    assert history[-1]["memory_format"] == config.memory_format
    assert conv_weight.is_contiguous(memory_format=torch.channels_last) == (
        config.memory_format == "channels-last")


@pytest.mark.parametrize("train_limit, loss_is_as_expected", [
    pytest.param(2048, math.isnan, marks=pytest.mark.reliability(
        fault="a learning rate that diverges (lr 50)",
        lost="nothing: the run stops at the first non-finite gradient, marked diverged")),
    # With more steps the same lr throws the loss to 1e22, kills every ReLU,
    # and the loss settles at a finite constant.
    pytest.param(4096, lambda loss: DIVERGED_LOSS_FACTOR * math.log(10) < loss < math.inf, marks=pytest.mark.reliability(
        fault="a learning rate that blows the loss up to 1e22 and then leaves it finite (lr 50)",
        lost="nothing: the run stops after the epoch whose loss exceeded 100 x ln 10, "
             "marked diverged")),
])
def test_divergence_stops_the_run_and_says_so(fashion_mnist_small, train_limit, loss_is_as_expected):
    config = TrainConfig(global_batch_size=64, lr=50.0, num_epochs=3, train_limit=train_limit,
                         test_limit=100)
    history, reports = train_reporting(config, fashion_mnist_small)
    assert len(history) == 1 and history[0]["status"] == Status.DIVERGED
    assert loss_is_as_expected(history[0]["train_loss"])
    assert len(reports) == 1


@pytest.mark.reliability(
    fault="a run that diverges where the non-finite check is read every 25 steps (as on a GPU)",
    lost="the diverged run's weights, not finite by then: its checkpoint keeps the history only")
def test_a_diverged_run_checkpoints_no_weights_that_are_not_finite(fashion_mnist_small,
                                                                    monkeypatch):
    # A CPU reading the check as rarely as a GPU does: non-finite steps are taken.
    monkeypatch.setitem(step_metrics.FINITE_CHECK_INTERVAL_STEPS, "cpu", 25)
    config = TrainConfig(global_batch_size=64, lr=50.0, num_epochs=3, train_limit=2048,
                         test_limit=100)
    history, reports = train_reporting(config, fashion_mnist_small)
    assert history[-1]["status"] == Status.DIVERGED
    assert reports[-1][1] is None  # no weights to checkpoint
    # A worker group restarted from that checkpoint trains nothing more.
    resumed, _ = train_reporting(config, fashion_mnist_small, resume_from=(None, history, []))
    assert resumed == history


def test_bucket_gradient_views_have_their_channels_last_parameters_layout(fashion_mnist_small):
    model = build_model("lenet", seed=0).to(memory_format=torch.channels_last)
    reference = build_model("lenet", seed=0).to(memory_format=torch.channels_last)
    sync = BucketedSync(model, CPU, group_transport(), bucket_cap_mb=0.1)
    images = step.to_model_input(torch.from_numpy(fashion_mnist_small.train_images[:32]))
    images = images.contiguous(memory_format=torch.channels_last)
    for network in (model, reference):
        network(images).sum().backward()
    conv_weights = [param for param in model.parameters() if param.dim() == 4]
    assert any(param.is_contiguous(memory_format=torch.channels_last)
               and not param.is_contiguous() for param in conv_weights)
    for param, expected in zip(model.parameters(), reference.parameters()):
        assert param.grad.stride() == param.stride(), param.shape
        assert torch.equal(param.grad, expected.grad)
    assert len(sync.buffers) > 1  # the views span several buckets


def test_resuming_from_a_checkpoint_equals_an_uninterrupted_run(fashion_mnist_small):
    # One layout (ONE_LAYOUT): runs compared bit for bit.
    config = TrainConfig(global_batch_size=128, lr=0.3, num_epochs=2, train_limit=1024,
                         test_limit=100, **ONE_LAYOUT)
    _, full = train_reporting(config, fashion_mnist_small)
    first_only = TrainConfig(**{**config.to_dict(), "num_epochs": 1})
    _, partial = train_reporting(first_only, fashion_mnist_small)
    _, state_after_1, history_after_1, evaluations_after_1 = partial[-1]
    _, resumed = train_reporting(
        config, fashion_mnist_small,
        resume_from=(state_after_1, history_after_1, evaluations_after_1))
    assert len(resumed) == 1  # only epoch 2 ran again
    metrics, state, history, _ = resumed[-1]
    assert metrics["epoch"] == 2 and [row["epoch"] for row in history] == [1, 2]
    for name, tensor in full[-1][1]["model"].items():
        assert torch.equal(tensor, state["model"][name]), name


def test_evaluations_within_an_epoch_are_timed_apart_from_training(fashion_mnist_small):
    # 8 steps an epoch, evaluated after steps 2, 4, 6 and 8.
    config = TrainConfig(global_batch_size=128, lr=0.05, momentum=0.9, num_epochs=2,
                         evals_per_epoch=4, train_limit=1024, test_limit=200, **ONE_LAYOUT)
    history, reports = train_reporting(config, fashion_mnist_small)
    assert [metrics["end_of_epoch"] for metrics, *_ in reports] == [False] * 3 + [True] + \
        [False] * 3 + [True]
    evaluations = reports[-1][3]
    assert [row["epoch"] for row in evaluations] == [0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2]
    # Training seconds exclude evaluation: they add up to the epochs' training time.
    assert evaluations[3]["train_s"] == pytest.approx(history[0]["epoch_time_s"])
    assert history[-1]["train_s"] == pytest.approx(sum(row["epoch_time_s"] for row in history))
    assert history[0]["eval_time_s"] == pytest.approx(sum(row["eval_s"] for row in evaluations[:4]))
    assert all(later["train_s"] > earlier["train_s"] for earlier, later in
               zip(evaluations, evaluations[1:]))
    assert evaluations[-1]["wall_s"] > evaluations[-1]["train_s"] + sum(
        row["eval_s"] for row in evaluations[:-1])
    # A mid-epoch checkpoint holds the last finished epoch's state.
    _, first_epoch_only = train_reporting(TrainConfig(**{**config.to_dict(), "num_epochs": 1}),
                                          fashion_mnist_small)
    end_of_1, mid_2 = first_epoch_only[-1][1]["model"], reports[5][1]["model"]
    assert all(torch.equal(end_of_1[name], mid_2[name]) for name in end_of_1)
    assert reports[-1][1]["optimizer"]["param_groups"][0]["momentum"] == 0.9
    assert "momentum_buffer" in reports[-1][1]["optimizer"]["state"][0]


def test_resuming_from_a_mid_epoch_checkpoint_redoes_that_epoch(fashion_mnist_small):
    config = TrainConfig(global_batch_size=128, lr=0.05, momentum=0.9, num_epochs=2,
                         evals_per_epoch=4, train_limit=1024, test_limit=200, **ONE_LAYOUT)
    _, full = train_reporting(config, fashion_mnist_small)
    _, state, history, evaluations = full[5]  # at epoch 1.5
    _, resumed = train_reporting(config, fashion_mnist_small,
                                 resume_from=(state, history, evaluations))
    assert [row["epoch"] for row in resumed[-1][3]] == [0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2]
    assert [row["test_acc"] for row in resumed[-1][3]] == [row["test_acc"] for row in full[-1][3]]
    # A resumed sweep's trial starts its clock anew: wall seconds go on from the last evaluation.
    walls = [row["wall_s"] for row in resumed[-1][3]]
    assert walls == sorted(walls), walls
    for name, tensor in full[-1][1]["model"].items():
        assert torch.equal(tensor, resumed[-1][1]["model"][name]), name


def test_training_ends_at_the_first_evaluation_that_reaches_stop_at(fashion_mnist_small):
    """--stop-at-target: the workers end the run at that evaluation, mid-epoch too
    (that epoch unrecorded), not at Tune's word, which comes a report later; a run
    resumed after it reached the target trains no more."""
    # A small MLP (tests/unit/own_code.py), which learns within these 24 steps where
    # the book's LeNet sits at chance: new bests at an epoch's end and mid-epoch.
    config = TrainConfig(model="own_code:mlp", global_batch_size=128, lr=0.05, momentum=0.9,
                         num_epochs=3, evals_per_epoch=4, train_limit=1024, test_limit=200)
    _, full = train_reporting(config, fashion_mnist_small)
    accuracies = [row["test_acc"] for row in full[-1][3]]
    # Each evaluation that beats every one before it: where a target there stops the run.
    records = [index for index in range(1, len(accuracies))
               if accuracies[index] > max(accuracies[:index])]
    last_two = records[-2:]
    assert {(index + 1) % 4 == 0 for index in last_two} == {True, False}, accuracies
    assert any((index + 1) % 4 and index % 4 for index in last_two), accuracies
    for index in last_two:
        history, reports = train_reporting(config, fashion_mnist_small, stop_at=accuracies[index])
        assert len(reports) == index + 1 and reports[-1][0]["test_acc"] == accuracies[index]
        assert len(history) == (index + 1) // 4  # the epochs that ended before it
        _, state, kept, evaluations = reports[-1]
        if (index + 1) % 4 and index % 4:  # mid-epoch: the weights that reached it kept,
            # not the epoch's start that the mid-epoch report before it holds (a copy)
            epoch_start = reports[index - 1][1]["model"]
            assert not all(torch.equal(state["model"][name], epoch_start[name])
                           for name in epoch_start)
        _, again = train_reporting(config, fashion_mnist_small,
                                   resume_from=(state, kept, evaluations),
                                   stop_at=accuracies[index])
        assert again == []


def test_warmup_ramps_the_learning_rate(fashion_mnist_small):
    seen = []
    config = TrainConfig(global_batch_size=256, lr=0.4, num_epochs=3, warmup_epochs=2,
                         train_limit=1024, test_limit=100)
    run_training(config, fashion_mnist_small, device=CPU,
                 report=lambda metrics, state, *_: seen.append(state["optimizer"]["param_groups"][0]["lr"]))
    # 4 steps per epoch, 8 warm-up steps: the lr after step s is 0.4 * s / 8.
    assert seen == [pytest.approx(0.2), pytest.approx(0.4), pytest.approx(0.4)]


def test_warmup_from_the_small_batchs_lr_as_goyal_et_al():
    # From 0.2 (1 worker's lr) to 0.4 (2 workers', twice the batch) over 8 steps.
    config = TrainConfig(global_batch_size=256, lr=0.4, num_epochs=3, warmup_epochs=2,
                         warmup_start_lr=0.2, train_limit=1024, test_limit=100)
    assert [loop.warmup_lr(config, index, 8) for index in range(8)] == pytest.approx(
        [0.2 + 0.2 * (index + 1) / 8 for index in range(8)])
    assert loop.warmup_lr(dataclasses.replace(config, warmup_start_lr=0.0), 3, 8) == (
        pytest.approx(0.4 * 4 / 8))


def test_the_loop_imports_no_ray():
    # The GPU benchmark runs the loop on machines where Ray is not installed.
    modules = "orchestrator.training.loop, orchestrator.config.options, orchestrator.training.data, orchestrator.training.models, " \
              "orchestrator.training.sync.strategies, orchestrator.training.sync.collectives"
    subprocess.run([sys.executable, "-c", f"import sys, {modules}; "
                    "assert not [m for m in sys.modules if m.split('.')[0] == 'ray']"],
                   check=True, cwd=REPO)


def test_a_trial_scores_only_its_own_test_limit_of_the_sweeps_data(fashion_mnist_small,
                                                                    monkeypatch):
    # A sweep loads its data once (here 1,000 test images); the exercises' ResNet-18 on
    # CPUs asks for 500 of them, and once scored all 10,000: 98 s of evaluation
    # against 56 s of training an epoch.
    scored = []
    evaluate = loop.evaluate

    def counting(model, images, labels, config, *, device):
        scored.append(len(labels))
        return evaluate(model, images, labels, config, device=device)

    monkeypatch.setattr(loop, "evaluate", counting)
    config = TrainConfig(global_batch_size=64, lr=0.1, num_epochs=1, train_limit=256,
                         test_limit=500)
    train_reporting(config, fashion_mnist_small)
    assert len(fashion_mnist_small.test_labels) == 1000 and scored == [500]


class _TightMemory(torch.nn.Module):
    """LeNet on a device that has room for at most `room` test images at a time:
    the error torch's CUDA allocator raises, beyond it."""

    def __init__(self, model: torch.nn.Module, room: int):
        super().__init__()
        self.model, self.room, self.batches = model, room, []

    def forward(self, x):
        self.batches.append(len(x))
        if len(x) > self.room:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
        return self.model(x)


def test_a_test_batch_without_memory_is_scored_in_halves(fashion_mnist_small):
    """A model whose training batch fits but whose test batch does not is scored,
    not failed: the batch halves until it fits and the accuracy is the same."""
    config = TrainConfig(global_batch_size=64, lr=0.1, test_limit=300, memory_format="nchw")
    model = build_model("lenet", seed=0)
    images = torch.tensor(fashion_mnist_small.test_images[:300])
    labels = torch.tensor(fashion_mnist_small.test_labels[:300])
    whole = step.evaluate(model, images, labels, config, device=torch.device("cpu"))
    tight = _TightMemory(model, room=50)
    assert step.evaluate(tight, images, labels, config, device=torch.device("cpu")) == whole
    # 128 fails, 64 fails, 32 fits: the rest of the 300 at 32 a batch, and so
    # the model's next evaluation from the start.
    assert tight.batches == [128, 64, 32, 32, 32, 32, 32, 32, 32, 32, 32, 12]
    tight.batches.clear()
    assert step.evaluate(tight, images, labels, config, device=torch.device("cpu")) == whole
    assert tight.batches == [32] * 9 + [12]
    with pytest.raises(torch.OutOfMemoryError):
        step.evaluate(_TightMemory(model, room=0), images, labels, config,
                      device=torch.device("cpu"))
