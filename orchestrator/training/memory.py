"""The least memory a worker's training step can need, measured on the driver.

A model of one's own, or a batch size larger than any tried before, most often
fails by running out of memory, on every worker of every trial. Some of what a
step holds is known before any worker starts: the weights and buffers, SGD's
momentum buffer (one per weight, from the first step on), and the activations
autograd keeps from the forward pass for the backward one. Counted on the
driver, on the CPU, at two small batch sizes, the activations are a fixed part
and a part per image; at the workers' batch they are the step's floor.

A floor, not an estimate of the peak: the gradients, the collectives' buffers,
the allocator's slack, cuDNN's workspace and CUDA's own context come on top
(torch's `max_memory_allocated` over a GPU trial is the peak: `peak_memory_mb`
in epochs.csv). So a step whose floor exceeds a device's memory cannot run on
it, and the driver refuses it before anything starts (driver/model_check.py).
The kept activations are those of torch's derivative formulas, which the CPU
and the GPU share, but for two (`_AsOnCuda`): `F.scaled_dot_product_attention`
keeps its whole attention matrix on the CPU's math path, and CUDA's fused
kernels (flash, memory-efficient) a log-sum-exp per query instead; and dropout
keeps its noise in fp32 on the CPU, a mask of bytes on CUDA. Both are counted as
CUDA keeps them. Recurrent layers (cuDNN's against the CPU's) have not been
compared. Under bf16 autocast the activations are taken at
half their fp32 bytes, the least a 2-byte type can hold them in (autocast keeps
some in fp32: more); under fp64, everything at its fp32 bytes (a floor at about
half). Validated against real steps by bench/memory_floor.py.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

# The two batch sizes the activations are counted at: their difference is the
# part per image; the smaller's rest, the part no batch size changes.
PROBE_BATCH_SIZES = (2, 4)


@dataclass(frozen=True)
class MemoryFloor:
    """What a worker's step holds at the least, in bytes, at any batch size."""

    state_bytes: int
    """The weights and buffers (BatchNorm's running statistics)."""
    momentum_bytes: int
    """SGD's momentum buffer: one value per trainable weight, in fp32, whole."""
    fixed_bytes: int
    """Activations kept for backward whatever the batch size."""
    per_image_bytes: int
    """Activations kept for backward per image of the worker's batch, in fp32: the
    images and labels themselves among them."""

    def parts(self, batch_size_per_worker: int, precision: str, momentum: float,
              optimizer_shards: int = 1) -> dict[str, int]:
        """The floor of a worker's step at its batch, precision and momentum, by part:
        weights, momentum (absent without; 1/`optimizer_shards` of it where each
        worker updates its own part of the weights, as `--sync sharded` does) and
        activations."""
        per_image = self.per_image_bytes // 2 if precision == "bf16" else self.per_image_bytes
        return {"weights": self.state_bytes,
                **({"momentum": self.momentum_bytes // optimizer_shards} if momentum else {}),
                "activations": self.fixed_bytes + per_image * batch_size_per_worker}

    def worker_bytes(self, batch_size_per_worker: int, precision: str, momentum: float,
                     optimizer_shards: int = 1) -> int:
        """The floor of a worker's step: its `parts` together."""
        return sum(self.parts(batch_size_per_worker, precision, momentum,
                              optimizer_shards).values())


def measure_floor(model: nn.Module, input_shape: tuple[int, ...],
                  num_classes: int) -> MemoryFloor:
    """Count what `model`'s step keeps on the CPU at PROBE_BATCH_SIZES images in
    fp32: its weights and buffers, and the activations autograd saves for backward
    (each storage once, the weights' own left out). Leaves the model in train mode;
    its BatchNorm statistics moved by the probe's batches."""
    state = [*model.parameters(), *model.buffers()]
    state_storages = {tensor.untyped_storage().data_ptr() for tensor in state}
    state_bytes = sum(_storage_bytes(state))
    momentum_bytes = sum(parameter.numel() * 4 for parameter in model.parameters()
                         if parameter.requires_grad)
    model.train()
    small, large = (_saved_bytes(model, batch, input_shape, num_classes, state_storages)
                    for batch in PROBE_BATCH_SIZES)
    per_image = max(0, (large - small) // (PROBE_BATCH_SIZES[1] - PROBE_BATCH_SIZES[0]))
    return MemoryFloor(state_bytes=state_bytes, momentum_bytes=momentum_bytes,
                       fixed_bytes=max(0, small - per_image * PROBE_BATCH_SIZES[0]),
                       per_image_bytes=per_image)


def _saved_bytes(model: nn.Module, batch_size: int, input_shape: tuple[int, ...],
                 num_classes: int, left_out: set[int]) -> int:
    """The bytes of the storages autograd saves in a forward pass and the loss of
    `batch_size` images, each storage once (an in-place ReLU's output is its
    convolution's), the storages in `left_out` not counted."""
    saved = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no storage of its own (sparse): a floor
            return tensor
        if storage.data_ptr() not in left_out:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    images = torch.zeros(batch_size, *input_shape)
    labels = torch.arange(batch_size) % num_classes
    as_on_cuda = _AsOnCuda(pack)
    # The graph, which holds every saved tensor, lives until the count is taken:
    # no storage freed in between can lend its address to another.
    with as_on_cuda, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = F.cross_entropy(model(images), labels)
    count = sum(saved.values()) + as_on_cuda.log_sum_exp_bytes
    del loss
    return count


class _AsOnCuda(TorchFunctionMode):
    """The two ops whose CPU kernels keep more for backward than CUDA's, run so that
    they keep what CUDA's do: a floor must not count what a GPU step does not hold.

    - `F.scaled_dot_product_attention`: its query, key, value and output, and a
      log-sum-exp per query in fp32, as the fused kernels keep them; not the CPU
      math path's attention matrix and its dropout mask (L x L a head). Caught as a
      torch function, whatever name calls it, and as torch.nn.functional's own
      name, which nn.MultiheadAttention calls from inside a function this mode
      hands on (the mode is off inside its handler): patched for the probe, which
      runs on the driver's one thread.
    - `F.dropout` (nn.Dropout, and nn.MultiheadAttention's on its weights) in
      training, not in place: through `native_dropout`, which keeps a mask of
      bytes, as CUDA's dropout does, not the CPU's fp32 noise. Caught the same two
      ways. In place, CUDA keeps fp32 noise too: left as it is.
    """

    def __init__(self, pack):
        super().__init__()
        self.pack = pack
        self.log_sum_exp_bytes = 0
        self.inside = False

    def __enter__(self):
        entered = super().__enter__()
        self.original, self.original_dropout = F.scaled_dot_product_attention, F.dropout
        F.scaled_dot_product_attention, F.dropout = self.counted, self.dropout
        return entered

    def __exit__(self, *exc_info):
        F.scaled_dot_product_attention, F.dropout = self.original, self.original_dropout
        return super().__exit__(*exc_info)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is self.original and not self.inside:
            return self.counted(*args, **kwargs)
        if func is self.original_dropout:
            return self.dropout(*args, **kwargs)
        return func(*args, **kwargs)

    def dropout(self, input: torch.Tensor, p: float = 0.5, training: bool = True,
                inplace: bool = False) -> torch.Tensor:
        if training and not inplace and 0 < p < 1:
            return torch.native_dropout(input, p, True)[0]
        return self.original_dropout(input, p, training, inplace)

    def counted(self, *args, **kwargs) -> torch.Tensor:
        self.inside = True
        try:
            # What the math path saves goes to these hooks, the innermost: uncounted.
            with torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor,
                                                          lambda tensor: tensor):
                output = self.original(*args, **kwargs)
        finally:
            self.inside = False
        query, key, value = [*args, *(kwargs[name] for name in ("query", "key", "value")
                                      if name in kwargs)][:3]
        if output.requires_grad:
            for tensor in (query, key, value, output):
                self.pack(tensor)
            self.log_sum_exp_bytes += query.shape[:-1].numel() * 4
        return output


def _storage_bytes(tensors: list[torch.Tensor]) -> list[int]:
    """Each distinct storage's bytes once: tied weights count once."""
    return list({tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes()
                 for tensor in tensors}.values())
