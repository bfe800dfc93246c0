import math

import pytest

from orchestrator.config.options import TrainConfig

from orchestrator.config.grid import SweepConfig
from orchestrator.config.dataset import shard_bounds
from orchestrator.errors import UserError


@pytest.mark.reliability(fault="invalid run config", lost="nothing")
@pytest.mark.parametrize("kwargs, fragment", [
    ({"model": "vgg"}, "unknown model 'vgg'"),
    ({"sync": "ring"}, "unknown sync 'ring'"),
    ({"num_workers": 0}, "number of workers must be >= 1"),
    ({"num_workers": 4, "global_batch_size": 3}, "smaller than the 4 workers"),
    ({"lr": 0.0}, "finite number > 0"),
    ({"lr": -0.1}, "finite number > 0"),
    ({"lr": math.inf}, "finite number > 0"),
    ({"lr": math.nan}, "finite number > 0"),
    ({"num_epochs": 0}, "epochs must be >= 1"),
    ({"train_limit": 60_001}, "larger than the 60000 training images"),
    ({"train_limit": 100, "global_batch_size": 256}, "smaller than one global batch"),
    ({"test_limit": 0}, "test limit must be >= 1"),
    ({"warmup_epochs": 3, "num_epochs": 2}, "exceed the 2 epochs"),
    ({"warmup_start_lr": 0.5, "lr": 0.2, "warmup_epochs": 1}, "start lr must be in .0, lr = 0.2., got"),
    ({"warmup_start_lr": -0.1, "warmup_epochs": 1}, "start lr must be in .0, lr = 0.2., got"),
    ({"threads_per_worker": 1.5}, "must be an integer"),
    ({"sync_batchnorm": True, "use_gpu": False}, "SyncBatchNorm does not run on CPUs"),
    ({"precision": "fp8"}, "unknown precision 'fp8'; choose one of fp32, bf16, fp16, fp64"),
    ({"memory_format": "nhwc"},
     "unknown memory format 'nhwc'; choose one of auto, nchw, channels-last"),
    ({"momentum": 1.0}, "momentum must be in"),
    ({"momentum": -0.1}, "momentum must be in"),
    ({"target_acc": 0.0}, "target accuracy must be in"),
    ({"target_acc": 1.5}, "target accuracy must be in"),
    ({"evals_per_epoch": 0}, "evaluations per epoch must be >= 1"),
    ({"evals_per_epoch": 5, "train_limit": 1024}, "5 evaluations per epoch exceed the 4 steps"),
    ({"gpus_per_worker": 0, "use_gpu": True}, "a share of one GPU, 0 < F <= 1, got 0"),
    ({"gpus_per_worker": 4e-5, "use_gpu": True}, "got 4e-05, which Ray counts as 0"),
    ({"gpus_per_worker": 1.5, "use_gpu": True}, "a share of one GPU, 0 < F <= 1, got 1.5"),
    ({"gpus_per_worker": math.nan, "use_gpu": True}, "a share of one GPU"),
    ({"gpus_per_worker": 0.5}, "--gpus-per-worker 0.5 is for GPU workers"),
    ({"sync_batchnorm": True, "use_gpu": True}, "LeNet has no BatchNorm layer"),
    ({"accumulation_steps": 0}, "accumulation steps must be >= 1"),
    ({"profile_steps": -1}, "profiled steps must be >= 0"),
    ({"accumulation_steps": 2.0}, "accumulation steps must be an integer"),
    ({"accumulation_steps": 65, "num_workers": 4, "global_batch_size": 259},
     "--accumulation-steps 65 needs at least that many examples in every worker's shard of "
     "a step, but batch 259 over 4 workers gives 64 to the smallest"),
])
def test_bad_config_is_one_clear_line(kwargs, fragment):
    with pytest.raises(UserError, match=fragment) as raised:
        TrainConfig(**kwargs)
    assert "\n" not in str(raised.value)


def test_derived_values_are_computed_once_from_the_config():
    config = TrainConfig(num_workers=2, global_batch_size=255, train_limit=1000)
    assert config.batch_sizes_per_worker == (128, 127)
    assert config.batch_size_per_worker == 128
    assert config.steps_per_epoch == 3  # the partial last batch is dropped
    assert TrainConfig(**config.to_dict()) == config
    assert config.micro_batch_size_per_worker == 128
    accumulated = TrainConfig(num_workers=2, global_batch_size=255, accumulation_steps=3)
    assert accumulated.micro_batch_size_per_worker == 43  # 128 as 43 + 43 + 42
    assert accumulated.batch_size_per_worker == 128


def test_precision_and_memory_format_reach_every_trial_of_a_sweep():
    sweep = SweepConfig.from_dict({"workers": [1, 2], "precision": "bf16",
                                   "memory_format": "channels-last"})
    assert {(point.train.precision, point.train.memory_format) for point in sweep.grid} == {
        ("bf16", "channels-last")}
    with pytest.raises(UserError, match="unknown precision 'half'"):
        SweepConfig.from_dict({"precision": "half"})


def test_momentum_is_an_axis_and_stopping_at_a_target_needs_one():
    sweep = SweepConfig.from_dict({"lrs": [0.1, 0.2], "momentums": [0.0, 0.9]})
    assert [(point.train.lr, point.train.momentum) for point in sweep.grid] == [
        (0.1, 0.0), (0.1, 0.9), (0.2, 0.0), (0.2, 0.9)]
    with pytest.raises(UserError, match="--stop-at-target needs --target-acc"):
        SweepConfig.from_dict({"stop_at_target": True})
    with pytest.raises(UserError, match="the list of momentums repeats a value"):
        SweepConfig.from_dict({"momentums": [0.9, 0.9]})


@pytest.mark.parametrize("total, shards", [(255, 2), (256, 2), (10, 3), (7, 7), (1000, 16)])
def test_shards_cover_everything_once_and_differ_by_at_most_one(total, shards):
    bounds = [shard_bounds(total, shards, rank) for rank in range(shards)]
    assert bounds[0][0] == 0 and bounds[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_a_warmup_start_without_a_warmup_is_not_checked():
    # One --warmup-start-lr beside an lr grid: only the points that warm up compare it.
    assert TrainConfig(lr=0.1, warmup_start_lr=0.2).warmup_epochs == 0
