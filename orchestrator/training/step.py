"""One step of the book's `train_batch` on a worker's shard of the global batch,
and the forward pass it shares with the test accuracy (the book's
`evaluate_accuracy_gpu`, each worker scoring a shard).

The loop (loop.py) calls `train_batch` for each step; `step_on` is the same step
for one worker, whole and with no read from the device, as a CUDA graph captures
it (graphed.py). Nothing here may import ray.
"""

import contextlib
import weakref

import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.config.dataset import shard_bounds
from orchestrator.config.options import TrainConfig
from orchestrator.training import layout
from orchestrator.training.loss_scale import LossScale
from orchestrator.training.step_metrics import GradientNoise, NonFiniteCheck
from orchestrator.training.sync.base import GradientSync
from orchestrator.training.sync.collectives import allreduce_, get_rank, get_world_size
from orchestrator.training.timing import DeviceTimer

# Test-set batches: big ones keep a GPU busy, but on a CPU a batch of 1024
# needs buffers over the 32 MB glibc serves from its heaps, mapped and faulted
# afresh at every batch (bench/notes/ray_overhead.md). A batch the device has no
# memory for is halved until one fits (`evaluate`): a model that trains must
# not fail at its test.
EVAL_BATCH_SIZE_CUDA = 1024
EVAL_BATCH_SIZE_CPU = 128
# Per model, the test batch that fit once a larger one did not (`evaluate`).
_EVAL_BATCH_SIZES: "weakref.WeakKeyDictionary[nn.Module, int]" = weakref.WeakKeyDictionary()
# The dtype of the weights, the gradients and their sync, by precision: bf16 and
# fp16 lower only the forward pass (under autocast), the weights stay fp32.
PARAMETER_DTYPES = {"fp32": torch.float32, "bf16": torch.float32, "fp16": torch.float32,
                    "fp64": torch.float64}
# The forward pass's dtype under autocast, where it is lowered (HALF_PRECISIONS).
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def train_batch(sync: GradientSync, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                labels: torch.Tensor, config: TrainConfig, check: NonFiniteCheck,
                timer: DeviceTimer, noise: GradientNoise | None = None,
                scale: LossScale | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The book's `train_batch` on this worker's shard of one global batch:
    forward, loss over the global batch, backward, gradient sync, SGD step;
    forward and backward once per micro-batch with `config.accumulation_steps`.

    Returns the shard's per-example losses and logits; None, without the
    step, once `check` reads a non-finite gradient. `timer` times this
    worker's own forward and backward (what a proportional split divides by).
    `scale`: fp16's loss scale (loss_scale.py), whose overflowing steps are
    skipped, not the run's end.
    """
    waited_s = sync.backward_wait_s
    started = timer.start()
    loss_scale = scale.record() if scale is not None else 1.0
    # Gradient accumulation: the shard in micro-batches, whose gradients add up in place
    # (each loss is already over the global batch); only the last backward is summed.
    micro_batches = micro_slices(len(labels), config.accumulation_steps)
    outputs = []
    for number, micro in enumerate(micro_batches, start=1):
        with sync.no_sync() if number < len(micro_batches) else contextlib.nullcontext():
            outputs.append(forward_backward(sync.module, images[micro], labels[micro], config,
                                            loss_scale=loss_scale))
    losses, logits = (torch.cat(parts) if len(parts) > 1 else parts[0]
                      for parts in zip(*outputs))
    timer.stop(started, minus_s=sync.backward_wait_s - waited_s, at=sync.take_compute_end())
    if scale is not None:  # this step's gradients, before any sum (ddp's: after)
        scale.unscale_([p.grad for p in sync.module.parameters() if p.grad is not None])
    if noise is not None:
        noise.add_shard(sync.summed_grads(), len(labels), config.global_batch_size)
    sync.synchronize()  # every worker now holds the sum over all workers (sharded: of its part)
    if not apply_sum(sync, optimizer, check, scale, noise):
        return None
    return losses.detach(), logits.detach()


def micro_slices(shard_size: int, accumulation_steps: int) -> list[slice]:
    """A shard of `shard_size` examples as `accumulation_steps` micro-batches, sizes
    differing by one at most, none empty (fewer where the shard is smaller; no
    split makes it so: split.proportional_shares)."""
    count = min(accumulation_steps, shard_size) or 1
    bounds = [shard_size * part // count for part in range(count + 1)]
    return [slice(start, stop) for start, stop in zip(bounds, bounds[1:])]


def apply_sum(sync: GradientSync, optimizer: torch.optim.Optimizer, check: NonFiniteCheck,
              scale: LossScale | None, noise: GradientNoise | None = None) -> bool:
    """The SGD step with the summed gradients, which are then cleared; False, without
    it, once `check` reads a non-finite one. With fp16's `scale`, every step's are
    read: a step whose are not finite is skipped on every worker and the scale
    halved; False only where it could not be halved. (`delayed`'s first step of an
    epoch has no sum yet: nothing to judge.)"""
    if scale is None:
        if check.failed():
            return False
    elif not sync.has_sum:
        pass
    elif check.overflowed():
        sync.zero_grad()
        return scale.skip()
    else:
        scale.stepped()
    if noise is not None:
        noise.add_batch(check.last_norm)
    sync.step(optimizer)  # optimizer.step(); sharded: of its part, then all-gather the parameters
    sync.zero_grad()
    return True


def forward_backward(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                      config: TrainConfig, *, loss_scale: float = 1.0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward, the per-example losses and backward of their sum over the global batch
    (times fp16's `loss_scale`); returns the losses and the logits."""
    logits = forward(model, images, config)
    losses = F.cross_entropy(logits, labels, reduction="none")
    # Dividing by the *global* batch makes the summed gradients over workers
    # the single-device mean gradient, even when shards differ in size.
    loss = losses.sum() / config.global_batch_size
    (loss * loss_scale if loss_scale != 1.0 else loss).backward()
    return losses, logits


def step_on(sync: GradientSync, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             labels: torch.Tensor, index: torch.Tensor, config: TrainConfig,
             check: NonFiniteCheck) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`train_batch`'s step for one worker, whole and with no read from the device, as a
    CUDA graph captures it (graphed.py): the batch gathered by `index`, forward,
    backward, the gradients counted by `check` (read after the step), SGD, the
    gradients cleared. Returns the per-example losses, the logits and the labels."""
    y = labels[index].long()
    losses, logits = forward_backward(sync.module, images[index], y, config)
    sync.synchronize()  # one worker: nothing to sum
    check.count_step()
    sync.step(optimizer)
    sync.zero_grad()
    return losses.detach(), logits.detach(), y


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
             config: TrainConfig, *, device: torch.device) -> float:
    """Test accuracy with every worker scoring its own shard (13.5, exercise 4).

    A batch that runs out of device memory (a model of one's own whose training
    batch fits, its test batch not) is scored again in halves, and the rest of
    the shard, and the model's later evaluations, at the size that fit; only a
    single image that does not fit fails. Each worker halves on its own: the
    ranks meet once, at the sum of the counts."""
    start, stop = shard_bounds(len(labels), get_world_size(), get_rank())
    batch_size = _EVAL_BATCH_SIZES.get(model, EVAL_BATCH_SIZE_CUDA if device.type == "cuda"
                                       else EVAL_BATCH_SIZE_CPU)
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # correct, seen
    model.eval()
    first, halved = start, False
    with torch.no_grad():
        while first < stop:
            last = min(first + batch_size, stop)
            try:
                logits = forward(model, images[first:last], config)
            except torch.OutOfMemoryError:
                if last - first == 1:
                    raise
                logits = None
            if logits is None:
                batch_size, halved = (last - first) // 2, True
                if device.type == "cuda":
                    # Out of the except clause, whose traceback held the failed
                    # batch's tensors: their blocks can go back now.
                    torch.cuda.empty_cache()
                continue
            counts[0] += (logits.argmax(dim=1) == labels[first:last].long()).sum()
            counts[1] += last - first
            first = last
    if halved:
        _EVAL_BATCH_SIZES[model] = batch_size
        if device.type == "cuda":  # room for NCCL's and cuBLAS's own allocations
            torch.cuda.empty_cache()
    allreduce_(counts)
    return (counts[0] / counts[1]).item()


def forward(model: nn.Module, images: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """Logits of an image batch on the model's device, in the weights' dtype
    whatever the precision of the forward pass."""
    dtype = PARAMETER_DTYPES[config.precision]
    x = to_model_input(images).to(dtype, memory_format=memory_format(config))
    # Autocast runs the convolutions and matrix products in bfloat16 (float16) and
    # keeps the weights fp32; the logits go back to fp32 because bfloat16's 8-bit
    # (float16's 11-bit) mantissa is too coarse for the loss and its sum over a batch.
    lowered = AUTOCAST_DTYPES.get(config.precision)
    with torch.autocast(x.device.type, dtype=lowered or torch.bfloat16,
                        enabled=lowered is not None):
        logits = model(x)
    return logits.to(dtype)


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """A batch as the model takes it, float32 [N, C, H, W]: uint8 pixels scaled to
    [0, 1] as the book's ToTensor does, other values as they are; [N, H, W] (one
    channel, as Fashion-MNIST is kept) gains its channel axis."""
    x = images.unsqueeze(1) if images.dim() == 3 else images
    return x.float().div_(255) if images.dtype == torch.uint8 else x.float()


def memory_format(config: TrainConfig) -> torch.memory_format:
    assert config.memory_format != "auto", "run_training resolves auto first"
    return layout.TORCH_FORMATS[config.memory_format]
