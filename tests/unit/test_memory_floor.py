"""The least memory a worker's step holds (training/memory.py), counted on the
driver, and the plan's refusal of a step no device or node could hold
(driver/model_check.py): the count is exact where it can be worked out by hand,
never above a real step's peak (torch's MemTracker over forward, backward and
SGD with momentum), and not far below it either."""

import dataclasses
import gc
import math

import numpy as np
import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker
from torch.nn import functional as F

from orchestrator.config.options import TrainConfig
from orchestrator.driver import device_check, equivalence, model_check
from orchestrator.driver.cluster import Cluster
from orchestrator.errors import UserError
from orchestrator.records import bytes_text, memory_text
from orchestrator.training.data import Images
from orchestrator.training.memory import measure_floor
from orchestrator.training.models import build_model, check_model

SHAPE = {"num_classes": 3, "input_shape": (1, 20, 20)}


def test_an_mlp_s_floor_is_its_weights_and_what_its_backward_reads():
    """Per image: the image (400 floats, read by the first layer's weight gradient),
    the ReLU's output (32, read by its own backward and the second layer's), the
    log-softmax's output (3) and the label (an int64)."""
    floor = check_model("own_code:mlp", **SHAPE).memory_floor
    parameters = 400 * 32 + 32 + 32 * 3 + 3
    assert floor.state_bytes == floor.momentum_bytes == 4 * parameters
    assert floor.per_image_bytes == 4 * (400 + 32 + 3) + 8
    assert floor.fixed_bytes < 64  # the loss's scalars
    assert floor.worker_bytes(10, "fp32", 0.9) == (8 * parameters + floor.fixed_bytes
                                                   + 10 * floor.per_image_bytes)
    assert (floor.worker_bytes(10, "fp32", 0.0)
            == floor.worker_bytes(10, "fp32", 0.9) - 4 * parameters)
    assert floor.worker_bytes(10, "bf16", 0.0) == (4 * parameters + floor.fixed_bytes // 2
                                                   + 10 * (floor.per_image_bytes // 2))
    # --sync sharded: each of 4 workers updates a quarter of the weights, and holds the
    # momentum of that quarter alone.
    assert floor.parts(10, "fp32", 0.9, optimizer_shards=4)["momentum"] == parameters


@pytest.mark.parametrize("name, input_shape, batch_size", [
    ("lenet", (1, 28, 28), 64), ("resnet18", (1, 28, 28), 32),
    ("examples.own_model:cnn_batchnorm", (1, 32, 32), 64)])
def test_the_floor_is_under_a_real_step_s_peak_and_near_it(name, input_shape, batch_size):
    """The second SGD step (its momentum buffers made by the first), counted by
    torch's MemTracker: every tensor live at once, gradients and temporaries too.
    The floor never exceeds it; and it holds much of it, so a floor counted wrong
    (the weights only: 0.1 of LeNet's) fails here. (ResNet-18: 0.87 of the peak at
    32 images; LeNet 0.54-0.58, whose peak is mostly temporaries.)"""
    model = build_model(name, seed=0, num_classes=10, input_shape=input_shape)
    floor = measure_floor(model, input_shape, 10).worker_bytes(batch_size, "fp32", 0.9)
    peak = _peak(model, input_shape, batch_size)
    assert 0.4 * peak < floor <= peak, (floor, peak)


def _peak(model: torch.nn.Module, input_shape: tuple[int, ...], batch_size: int,
          num_classes: int = 10) -> int:
    """The bytes every tensor live at once holds at the peak of a second SGD step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch_size, *input_shape)
    labels = torch.arange(batch_size) % num_classes

    def step():
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad()
    step()
    tracker = MemTracker()
    tracker.track_external(model, optimizer, images, labels)
    with tracker:
        step()
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def test_the_activations_grow_with_the_batch_as_counted_at_two_sizes():
    model = build_model("resnet18", seed=0, num_classes=10, input_shape=(1, 28, 28))
    floor = measure_floor(model, (1, 28, 28), 10)
    from orchestrator.training.memory import _saved_bytes
    state = {tensor.untyped_storage().data_ptr()
             for tensor in [*model.parameters(), *model.buffers()]}
    assert _saved_bytes(model, 12, (1, 28, 28), 10, state) == (floor.fixed_bytes
                                                              + 12 * floor.per_image_bytes)


def test_attention_is_counted_as_cuda_s_fused_kernels_keep_it(monkeypatch):
    """The CPU's math path keeps each head's 64 x 64 attention matrix (and a dropout
    mask of it), which CUDA's flash and memory-efficient kernels do not: counted as
    those keep it, the query, key, value, output and a log-sum-exp a query. Per
    image here: the images (a view of which the projection keeps), the tokens (query,
    key and value at once), the output and 2 x 64 log-sum-exps, and the loss's."""
    shape = {"num_classes": 3, "input_shape": (1, 16, 32)}
    floor = check_model("own_code:attention", **shape).memory_floor
    assert floor.per_image_bytes == 4 * (512 + 512 + 512 + 2 * 64) + 4 * 3 + 8
    # Reached from inside nn.MultiheadAttention too: without the count as fused,
    # the math path's matrices (2 heads x 64 x 64, in fp32 and more) come back.
    layer = check_model("own_code:encoder_layer", **shape).memory_floor
    from orchestrator.training import memory

    class AsMathPath(memory._AsOnCuda):
        def counted(self, *args, **kwargs):
            return self.original(*args, **kwargs)
    monkeypatch.setattr(memory, "_AsOnCuda", AsMathPath)
    math_path = check_model("own_code:encoder_layer", **shape).memory_floor
    assert math_path.per_image_bytes - layer.per_image_bytes >= 4 * 2 * 64 * 64


def test_dropout_is_counted_as_cuda_keeps_it_a_mask_of_bytes():
    """The CPU's dropout keeps its noise in fp32, CUDA's a byte a value. Per image:
    the image (16 floats), the mask (32 bytes), the dropped values the second
    layer reads (32 floats), and the loss's."""
    floor = check_model("own_code:dropout", num_classes=3, input_shape=(1, 4, 4)).memory_floor
    assert floor.per_image_bytes == 4 * 16 + 32 + 4 * 32 + 4 * 3 + 8
    assert check_model("own_code:drops_through_torch", num_classes=3,
                       input_shape=(1, 4, 4)).memory_floor == floor


def test_a_recurrent_layer_is_counted_as_cudnn_reads_it():
    """Per image: the rows (20 steps of 20 values), the initial hidden and cell
    states (16 each), the output sequence (20 x 16; the classifier's last step is a
    view of it), and the loss's; not the CPU's workspace, nor the final states:
    0.1 of the CPU step's peak, the rest oneDNN's workspace."""
    floor = check_model("own_code:recurrent", **SHAPE).memory_floor
    assert floor.per_image_bytes == 4 * (20 * 20 + 2 * 16 + 20 * 16) + 4 * 3 + 8
    model = build_model("own_code:recurrent", seed=0, **SHAPE)
    assert floor.worker_bytes(64, "fp32", 0.9) <= _peak(model, SHAPE["input_shape"], 64, 3)


def test_only_what_the_step_holds_counts():
    """A branch whose result was detached is freed before backward; a layer the
    loss never reaches gets no momentum; a float64 buffer is held in fp32, as the
    workers cast it; and the probe's graphs are freed without the collector."""
    mlp = check_model("own_code:mlp", **SHAPE).memory_floor
    assert check_model("own_code:logs_statistics", **SHAPE).memory_floor == mlp
    spare = check_model("own_code:unused_parameters", **SHAPE).memory_floor
    assert spare.momentum_bytes == mlp.momentum_bytes
    assert spare.state_bytes == mlp.state_bytes + 4 * (4 * 4 + 4)
    standardised = check_model("own_code:standardised", **SHAPE).memory_floor
    assert standardised.state_bytes == mlp.state_bytes + 4 * 400
    assert standardised.per_image_bytes == mlp.per_image_bytes
    from orchestrator.training import memory
    held = []

    class Recorded(memory._Held):
        def __init__(self):
            super().__init__()
            held.append(self)
    original, memory._Held = memory._Held, Recorded
    gc.disable()
    try:
        measure_floor(build_model("resnet18", seed=0, num_classes=10, input_shape=(1, 28, 28)),
                      (1, 28, 28), 10)
        assert held and not any(record.any_alive() for record in held)
    finally:
        gc.enable()
        memory._Held = original


def test_a_count_that_fails_leaves_torch_as_it_was():
    """torch.nn.functional's two names are patched for the count alone, a failed one
    included; a model whose count fails is not checked (its facts hold no floor)."""
    scaled_dot_product_attention, dropout = F.scaled_dot_product_attention, F.dropout
    facts = check_model("own_code:fails_in_training", num_classes=3, input_shape=(1, 4, 4))
    assert facts.memory_floor is None and facts.parameters == 16 * 3 + 3
    assert (F.scaled_dot_product_attention, F.dropout) == (scaled_dot_product_attention, dropout)


def _config(**changes) -> TrainConfig:
    return dataclasses.replace(TrainConfig(model="own_code:upsampled", num_workers=2,
                                           global_batch_size=64, momentum=0.9), **changes)


def _cluster(*nodes: dict) -> Cluster:
    return Cluster(address=None, dashboard_url=None, node_resources=tuple(nodes))


NODE = {"CPU": 8.0, "memory": 16e9, "object_store_memory": 4e9}


def test_a_step_no_node_can_hold_is_refused_in_one_line_naming_the_least():
    model_check.check_model(_config())
    per_image = 4 * 28 * 28 * 32 * 32  # the upsampled image the convolution keeps
    fits, too_big, larger = (_config(global_batch_size=size) for size in (64, 8192, 32768))
    model_check.require_room_in_memory([fits], _cluster(NODE))
    with pytest.raises(UserError) as refused:
        model_check.require_room_in_memory([fits, larger, too_big], _cluster(NODE))
    line = str(refused.value)
    assert "\n" not in line
    # Each of the two workers' 4096 images fits alone; on the one node, together not.
    assert 4096 * per_image < 20e9 < 2 * 4096 * per_image
    assert line.startswith("2 workers at global batch 8192, fp32 (the least of this plan's 2 "
                           "points that cannot fit): the 2 workers that must share a node, "
                           "at 8192 images among them, hold at least 26.3GB (weights "
                           "71kB + momentum 71kB + activations 26.3GB), more than a node of "
                           "20GB (the memory Ray counts there) holds; a smaller --batch-size, "
                           "or fewer workers on a node, needs less"), line
    # Two nodes: a worker each, which fits; 16384 images a worker (52.7GB) fit neither.
    model_check.require_room_in_memory([too_big], _cluster(NODE, NODE))
    with pytest.raises(UserError, match=r": a worker's step at 16384 images holds at least "
                                        r"52\.7GB \(weights .*, more than a node of 20GB"):
        model_check.require_room_in_memory([larger], _cluster(NODE, NODE))
    # A node that counts no memory: that cluster is not checked.
    model_check.require_room_in_memory([larger], _cluster({"CPU": 8.0}, NODE))


def test_gradient_accumulation_holds_one_micro_batch_s_activations_at_a_time():
    """--accumulation-steps 4: 4096 images a worker, 1024 of them in memory at once."""
    model_check.check_model(_config())
    whole, accumulated = (_config(global_batch_size=8192, accumulation_steps=steps)
                          for steps in (1, 4))
    with pytest.raises(UserError, match="; so does --accumulation-steps N, the same step"):
        model_check.require_room_in_memory([whole], _cluster(NODE))
    model_check.require_room_in_memory([accumulated], _cluster(NODE))
    assert (" at 4096 images a worker in 4 micro-batches of 1024 or fewer, fp32 ("
            in model_check.memory_line([accumulated]))
    per_image = 4 * 28 * 28 * 32 * 32  # the upsampled image the convolution keeps
    saved_mb = (model_check.first_worker_floor_mb(whole)
                - model_check.first_worker_floor_mb(accumulated))
    assert saved_mb == pytest.approx(3072 * per_image / 2**20, rel=0.01)


def test_the_equivalence_check_s_one_device_must_hold_the_global_batch():
    """Two workers of 4096 images fit on two nodes; the check's one-device run of
    the 8192 does not: refused before either run, with the way that still checks
    the model (its layers, not the batch size, decide)."""
    model_check.check_model(_config())
    two_nodes = _cluster(NODE, NODE)
    split = _config(global_batch_size=8192)
    model_check.require_room_in_memory([split], two_nodes)
    with pytest.raises(UserError) as refused:
        equivalence.require_room(split, two_nodes, None)
    assert str(refused.value) == (
        "--check-equivalence runs the global batch on one device: 1 worker at global batch "
        "8192, fp64: a worker's step at 8192 images holds at least 26.3GB (weights 35.5kB + "
        "momentum 35.5kB + activations 26.3GB), more than a node of 20GB (the memory Ray "
        "counts there) holds; a smaller --batch-size checks the same model (its layers, not "
        "the batch size, make it agree or not)")
    equivalence.require_room(_config(global_batch_size=4096), two_nodes, None)


def test_the_proportional_split_is_held_to_what_any_shares_must_hold():
    """3 workers on 2 nodes of 24GB: one node holds two. Under the even split they
    hold 4096 images each (26.3GB together: refused); the proportional split may
    shrink their shares, and only half the batch, 6144 images (19.7GB), is sure
    to be on one node: it passes; at 16384, half is 8192 (26.3GB): refused."""
    model_check.check_model(_config())
    roomy = {**NODE, "memory": 20e9}
    even = _config(num_workers=3, global_batch_size=12288)
    with pytest.raises(UserError, match="the 2 workers that must share a node, at 8192 "
                                        "images among them, hold at least 26.3GB"):
        model_check.require_room_in_memory([even], _cluster(roomy, roomy))
    proportional = dataclasses.replace(even, split="proportional")
    model_check.require_room_in_memory([proportional], _cluster(roomy, roomy))
    with pytest.raises(UserError, match=": the workers on one node, at 8192 images among "
                                        "them, hold at least 26.3GB"):
        model_check.require_room_in_memory(
            [dataclasses.replace(proportional, global_batch_size=16384)], _cluster(roomy, roomy))


def test_gpu_workers_are_checked_against_the_gpu_check_s_memory():
    model_check.check_model(_config())
    gpu_node = {"CPU": 16.0, "GPU": 2.0, "memory": 1e12, "object_store_memory": 1e11}
    shared = _config(use_gpu=True, num_workers=4, gpus_per_worker=0.5, global_batch_size=4096)
    alone = dataclasses.replace(shared, num_workers=2, gpus_per_worker=1.0, global_batch_size=2048)
    model_check.require_room_in_memory([shared], _cluster(gpu_node))  # no GPU memory read: later
    model_check.require_room_in_memory([alone], _cluster(gpu_node), 141e9)  # 1024 a GPU: 3.3G
    # 4 workers of 1024 images on 2 GPUs: two share one; 3.3GB each, on 5GB.
    with pytest.raises(UserError) as refused:
        model_check.require_room_in_memory([shared], _cluster(gpu_node), 5e9)
    assert ("the 2 workers that must share a GPU, at 2048 images among them, hold at least "
            "6.58GB") in str(refused.value)
    assert str(refused.value).endswith("more than a GPU of 5GB holds; fewer images on a GPU (a "
                                       "smaller --batch-size, or a larger --gpus-per-worker: "
                                       "fewer workers to a GPU) or --precision bf16 needs less; "
                                       "so does --accumulation-steps N, the same step in N "
                                       "micro-batches")
    model_check.require_room_in_memory([alone], _cluster(gpu_node), 5e9)
    # Two workers on halves of the two GPUs: Ray gives both halves of the first
    # (best fit), so they share it, though a GPU each would have held them.
    halves = dataclasses.replace(alone, gpus_per_worker=0.5)
    with pytest.raises(UserError, match="the 2 workers that must share a GPU, at 2048 images "
                                        "among them, hold at least 6.58GB"):
        model_check.require_room_in_memory([halves], _cluster(gpu_node), 5e9)
    # Four at 0.3 on four GPUs: three share the first (not one each, nor two).
    four_gpus = {**gpu_node, "GPU": 4.0}
    thirds = _config(use_gpu=True, num_workers=4, gpus_per_worker=0.3, global_batch_size=2048)
    with pytest.raises(UserError, match="the 3 workers that must share a GPU, at 1536 images "
                                        "among them, hold at least 4.9"):
        model_check.require_room_in_memory([thirds], _cluster(four_gpus), 4.5e9)
    model_check.require_room_in_memory([dataclasses.replace(thirds, gpus_per_worker=0.5)],
                                       _cluster(four_gpus), 4.5e9)


def test_a_gpu_worker_s_copy_of_the_data_set_is_counted_and_named():
    """Each GPU worker copies the images it uses to its GPU (loop.py); workers that
    share a GPU each copy them. 2 workers of 64 images (0.2GB each) on halves of a
    GPU of 1GB: their steps fit; beside 2 x 0.4GB of float32 images, not."""
    model_check.check_model(_config())
    gpu_node = {"CPU": 16.0, "GPU": 1.0, "memory": 1e12, "object_store_memory": 1e11}
    image = 4 * 28 * 28  # bytes of a float32 image [1, 28, 28]
    data = Images(train_images=np.zeros((600_000, 1, 28, 28), np.float32),
                  train_labels=np.zeros(600_000, np.int64),
                  test_images=np.zeros((50_000, 1, 28, 28), np.float32),
                  test_labels=np.zeros(50_000, np.int64))
    shared = _config(use_gpu=True, gpus_per_worker=0.5, global_batch_size=128,
                     train_size=600_000, test_size=50_000, train_limit=120_000)
    model_check.require_room_in_memory([shared], _cluster(gpu_node), 1e9)
    with pytest.raises(UserError) as refused:
        model_check.require_room_in_memory([shared], _cluster(gpu_node), 1e9, data=data)
    copy = (120_000 + 50_000) * (image + 8)  # the run's limit, not the 600000 loaded
    line = str(refused.value)
    assert (f" + 2 workers' copies of the data set {bytes_text(2 * copy)}), more than a GPU of "
            f"1GB holds; ") in line, line
    # The steps alone fit: the data's limits are the way out, and on this one GPU no
    # --gpus-per-worker spreads the copies.
    assert line.endswith("holds; each GPU worker copies the 120000 train and 50000 test images "
                         "it uses to its GPU: a smaller --train-limit or --test-limit copies "
                         "less"), line
    # Two GPUs: Ray still puts both halves on the first (best fit), and a GPU each
    # would hold one copy each, which fits.
    two_gpus = {**gpu_node, "GPU": 2.0}
    with pytest.raises(UserError, match=r"copies less; fewer workers to a GPU \(a larger "
                                        r"--gpus-per-worker\) make fewer copies on each$"):
        model_check.require_room_in_memory([shared], _cluster(two_gpus), 1e9, data=data)
    model_check.require_room_in_memory([dataclasses.replace(shared, gpus_per_worker=1.0)],
                                       _cluster(two_gpus), 1e9, data=data)
    # Steps too large alone: their ways first, then the data's.
    with pytest.raises(UserError, match=r"a smaller --batch-size.*needs less; so does "
                                        r"--accumulation-steps N.*; each GPU worker copies the "
                                        r"120000 train.*copies less$"):
        model_check.require_room_in_memory([dataclasses.replace(shared, global_batch_size=1024)],
                                           _cluster(gpu_node), 1e9, data=data)
    # The proportional split on one GPU: its workers hold the whole batch (64 images,
    # 0.2GB) beside both copies (1.07GB). On 0.15GB no smaller copies would do: the
    # steps' ways come first (were the copies counted beside the crowded workers'
    # smallest shares alone, the data's limits would seem enough).
    proportional = dataclasses.replace(shared, split="proportional", global_batch_size=64)
    with pytest.raises(UserError) as refused:
        model_check.require_room_in_memory([proportional], _cluster(gpu_node), 0.15e9,
                                           data=data)
    assert "the workers on one GPU, at 64 images among them, hold" in str(refused.value)
    assert "2 workers' copies of the data set" in str(refused.value)
    assert "micro-batches; each GPU worker copies the 120000 train and 50000 test" in str(
        refused.value)
    # CPU workers read Ray's one shared copy, in the object store: not counted per
    # worker (two copies would not fit this node's 1.2GB beside the steps).
    small_node = {"CPU": 8.0, "memory": 1e9, "object_store_memory": 0.2e9}
    model_check.require_room_in_memory([dataclasses.replace(shared, use_gpu=False,
                                                            gpus_per_worker=1.0)],
                                       _cluster(small_node), data=data)


def test_a_run_of_one_step_holds_no_momentum_beside_its_activations():
    """SGD makes its momentum buffer in the first update, after that step's
    activations are freed: a single step never holds both."""
    model_check.check_model(_config())
    one_step = _config(train_limit=64, num_epochs=1)
    assert one_step.steps_per_epoch == 1
    assert "momentum" not in model_check.memory_line([one_step])
    assert "momentum" in model_check.memory_line([dataclasses.replace(one_step, num_epochs=2)])


def test_the_book_s_models_are_checked_too_though_the_plan_leaves_their_line_out():
    """The book's ResNet-18 keeps about 3.5MB an image (28x28 images, 64 channels
    from the first layer on): the whole of Fashion-MNIST in one worker's batch does
    not fit an H200's 141GB; 4096 images do. LeNet's line is no news to print."""
    resnet = TrainConfig(model="resnet18", use_gpu=True, num_workers=1,
                         global_batch_size=60000, momentum=0.9)
    gpu_node = {"CPU": 16.0, "GPU": 1.0, "memory": 1e11}
    with pytest.raises(UserError, match=r"^1 worker at global batch 60000, fp32: a worker's "
                                        r"step at 60000 images holds at least 2\d\dGB "):
        model_check.require_room_in_memory([resnet], _cluster(gpu_node), 141e9)
    model_check.require_room_in_memory([dataclasses.replace(resnet, global_batch_size=4096)],
                                       _cluster(gpu_node), 141e9)
    assert model_check.memory_line([resnet]) == ""


def test_the_plan_s_memory_line_names_the_largest_floor(capsys):
    model_check.check_model(_config())
    line = model_check.memory_line([_config(), _config(global_batch_size=256)])
    assert line.startswith("memory: a worker's step holds at least ")
    assert " at 128 images a worker, fp32 (weights " in line
    assert line.endswith(", the most of the plan's points; gradients, the sums' buffers and "
                         "the allocator's slack come on top")
    assert model_check.memory_line([TrainConfig()]) == ""  # the book's LeNet: not built
    weights = bytes_text(4 * 8875)  # upsampled's 8875 parameters
    assert f"(weights {weights} + momentum {weights} + activations " in line
    sharded = model_check.memory_line([_config(sync="sharded", global_batch_size=256)])
    assert f"(weights {weights} + momentum {bytes_text(2 * 8875)} + " in sharded


def test_the_gpu_check_reads_each_node_s_gpu_memory(monkeypatch):
    """The function the GPU nodes run, run here with torch's CUDA calls stubbed."""
    class Properties:  # an H200's
        total_memory, name, major, minor = 150_000_000_000, "NVIDIA H200", 9, 0

    class T4Properties:
        total_memory, name, major, minor = 15_000_000_000, "Tesla T4", 7, 5
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Properties)
    assert device_check._gpu_answer()() == (None, 150_000_000_000, None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: T4Properties)
    assert device_check._gpu_answer()() == (None, 15_000_000_000,
                                            "Tesla T4 (compute capability 7.5)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    cause, memory, _ = device_check._gpu_answer()()
    assert cause.endswith("torch.cuda.is_available() is False") and memory is None


def test_a_gpu_run_s_lines_set_its_peak_beside_the_floor():
    """trials.csv's memory_floor_mb is the first worker's floor at its share of the
    first epoch (even: 33 of 65 images), the least its GPU peak can be; the lines
    print both on a GPU, nothing on CPUs."""
    model_check.check_model(_config())
    config = _config(global_batch_size=65)
    floor = model_check._FACTS[model_check._model_key(config)].memory_floor
    assert model_check.first_worker_floor_mb(config) == sum(
        floor.parts(33, "fp32", 0.9).values()) / 2**20
    assert math.isnan(model_check.first_worker_floor_mb(
        TrainConfig(model="own_code:never_checked")))
    assert model_check.first_worker_floor_mb(TrainConfig()) > 0  # the book's LeNet
    gpu = [{"peak_memory_mb": 900.0}, {"peak_memory_mb": 1200.0}]
    assert memory_text(gpu, 700.0) == (", the first worker's peak memory 1.26GB (its step's "
                                       "floor 734MB)")
    assert memory_text(gpu, math.nan) == memory_text(gpu) == (
        ", the first worker's peak memory 1.26GB")
    assert memory_text([{"peak_memory_mb": math.nan}], 700.0) == ""
    assert memory_text([{"peak_memory_mb": None}, {}]) == ""
