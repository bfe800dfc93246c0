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
and the GPU share, but for three (`_AsOnCuda`): `F.scaled_dot_product_attention`
keeps its whole attention matrix on the CPU's math path, and CUDA's fused
kernels (flash, memory-efficient) a log-sum-exp per query instead; dropout
keeps its noise in fp32 on the CPU, a mask of bytes on CUDA; and recurrent
layers (LSTM, GRU, RNN) keep the CPU's own workspace, and cuDNN its own, of
which only the layer's input, states and output are sure. Each is counted as
the least CUDA keeps. Only what the graph still holds when the loss is computed
counts: a branch whose result was detached (a logged statistic) is freed
before backward. What autograd's hooks do not see is not counted, which keeps
the count a floor: tensors a custom autograd.Function keeps as `ctx`
attributes, the inputs `torch.utils.checkpoint` keeps, tensors a model keeps on
itself, cuDNN's reserve space. Under bf16 autocast the activations are taken at
half their fp32 bytes, the least a 2-byte type can hold them in (autocast keeps
some in fp32: more); under fp64, everything at its fp32 bytes (a floor at about
half); the weights as the workers hold them (cast to fp32: a model built in fp64
is counted at fp32's bytes). SGD keeps a momentum buffer for the weights the
loss reaches: a weight that gets no gradient gets none under the syncs that
leave its gradient unset. Validated against real steps by bench/memory_floor.py.
"""

import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from orchestrator.config.options import HALF_PRECISIONS

# The two batch sizes the activations are counted at: their difference is the
# part per image; the smaller's rest, the part no batch size changes.
PROBE_BATCH_SIZES = (2, 4)


@dataclass(frozen=True)
class MemoryFloor:
    """What a worker's step holds at the least, in bytes, at any batch size."""

    state_bytes: int
    """The weights and buffers (BatchNorm's running statistics)."""
    momentum_bytes: int
    """SGD's momentum buffer: one value per trainable weight the loss reaches, in
    fp32, whole."""
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
        halved = 2 if precision in HALF_PRECISIONS else 1
        return {"weights": self.state_bytes,
                **({"momentum": self.momentum_bytes // optimizer_shards} if momentum else {}),
                "activations": (self.fixed_bytes // halved
                                + self.per_image_bytes // halved * batch_size_per_worker)}

    def worker_bytes(self, batch_size_per_worker: int, precision: str, momentum: float,
                     optimizer_shards: int = 1) -> int:
        """The floor of a worker's step: its `parts` together."""
        return sum(self.parts(batch_size_per_worker, precision, momentum,
                              optimizer_shards).values())


def measure_floor(model: nn.Module, input_shape: tuple[int, ...],
                  num_classes: int) -> MemoryFloor:
    """Count what `model`'s step keeps on the CPU at PROBE_BATCH_SIZES images in
    fp32: its weights and buffers, and the activations autograd saves for backward
    (each storage once, the weights' own left out). Leaves the model in fp32 and
    train mode, its BatchNorm statistics moved by the probe's batches."""
    model.to(torch.float32)  # as the workers hold it (loop.py): a float64 buffer in fp32
    state = [*model.parameters(), *model.buffers()]
    state_storages = {tensor.untyped_storage().data_ptr() for tensor in state}
    state_bytes = sum(_storage_bytes(state))
    model.train()
    reached: set[int] = set()
    small, large = (_saved_bytes(model, batch, input_shape, num_classes, state_storages,
                                 reached) for batch in PROBE_BATCH_SIZES)
    momentum_bytes = sum(parameter.numel() * 4 for parameter in model.parameters()
                         if parameter.requires_grad and id(parameter) in reached)
    per_image = max(0, (large - small) // (PROBE_BATCH_SIZES[1] - PROBE_BATCH_SIZES[0]))
    return MemoryFloor(state_bytes=state_bytes, momentum_bytes=momentum_bytes,
                       fixed_bytes=max(0, small - per_image * PROBE_BATCH_SIZES[0]),
                       per_image_bytes=per_image)


def _saved_bytes(model: nn.Module, batch_size: int, input_shape: tuple[int, ...],
                 num_classes: int, left_out: set[int], reached: set[int] | None = None) -> int:
    """The bytes of the storages autograd holds for backward once the forward pass
    and the loss of `batch_size` images are done, each storage once (an in-place
    ReLU's output is its convolution's), the storages in `left_out` not counted;
    the ids of the parameters the loss reaches are added to `reached`."""
    held = _Held()
    images = torch.zeros(batch_size, *input_shape)
    labels = torch.arange(batch_size) % num_classes
    as_on_cuda = _AsOnCuda()
    with as_on_cuda, torch.autograd.graph.saved_tensors_hooks(held.pack, _Saved.unpack):
        loss = F.cross_entropy(model(images), labels)
    # Counted while the graph lives: each storage it holds once (none freed in between
    # can lend its address to another), none it let go.
    storages = {}
    for tensor in [*held.alive(), *as_on_cuda.alive()]:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no storage of its own (sparse): a floor
            continue
        if storage.data_ptr() not in left_out:
            storages[storage.data_ptr()] = storage.nbytes()
    if reached is not None:
        reached |= _reached_parameters(loss)
    count = sum(storages.values()) + as_on_cuda.log_sum_exp_bytes()
    del loss
    return count


class _Saved:
    """A tensor autograd saved, detached (a saved output would hold its own node: a
    cycle only the garbage collector frees) and weakly referenced by `_Held`: it
    lives as long as the graph that keeps it."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    @staticmethod
    def unpack(saved: "_Saved") -> torch.Tensor:
        return saved.tensor


class _Held:
    """The saved tensors of one forward pass: `pack` is autograd's hook."""

    def __init__(self):
        self.refs: list[weakref.ref] = []

    def pack(self, tensor: torch.Tensor) -> _Saved:
        saved = _Saved(tensor.detach())
        self.refs.append(weakref.ref(saved))
        return saved

    def alive(self) -> list[torch.Tensor]:
        """Those the graph still holds."""
        return [saved.tensor for saved in (ref() for ref in self.refs) if saved is not None]

    def any_alive(self) -> bool:
        return any(ref() is not None for ref in self.refs)


def _reached_parameters(loss: torch.Tensor) -> set[int]:
    """The ids of the leaf tensors (the parameters among them) that `loss`'s graph
    reaches: those backward gives a gradient."""
    reached, seen, nodes = set(), set(), [loss.grad_fn]
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad's leaf
        if variable is not None:
            reached.add(id(variable))
        nodes.extend(next_node for next_node, _ in node.next_functions)
    return reached


class _AsOnCuda(TorchFunctionMode):
    """The ops whose CPU kernels keep more for backward than CUDA's, run so that
    what is counted of them is what CUDA's keep at the least: a floor must not
    count what a GPU step does not hold.

    - `F.scaled_dot_product_attention`: its query, key, value and output, and a
      log-sum-exp per query in fp32, as the fused kernels keep them; not the CPU
      math path's attention matrix and its dropout mask (L x L a head). Caught as a
      torch function, whatever name calls it, and as torch.nn.functional's own
      name, which nn.MultiheadAttention calls from inside a function this mode
      hands on (the mode is off inside its handler): patched for the probe, which
      runs on the driver's one thread.
    - `F.dropout` (nn.Dropout, and nn.MultiheadAttention's on its weights) and
      `torch.dropout` in training, not in place: through `native_dropout`, which
      keeps a mask of bytes, as CUDA's dropout does, not the CPU's fp32 noise.
      Caught the same two ways. In place, CUDA keeps fp32 noise too: left as it is.
    - `torch.lstm`, `torch.gru`, `torch.rnn_tanh`, `torch.rnn_relu` (nn.LSTM, GRU,
      RNN): their input, initial states and output sequence, which cuDNN's backward
      reads (`_cudnn_rnn_backward`; not the final states); not the CPU's workspace
      (oneDNN's: some 16 values a hidden unit a step), nor cuDNN's reserve space,
      which is its own.

    What such an op's own kernel saves is held apart: the op's counted tensors
    count while the graph still holds that (a branch whose result was detached lets
    it go, and them with it).
    """

    RECURRENT = (torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu)

    def __init__(self):
        super().__init__()
        # Per op run as fused: what its own kernel saved, what is counted of it while
        # that lives, and the bytes of its log-sum-exps.
        self.fused: list[tuple[_Held, list[torch.Tensor], int]] = []
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
        if func is torch.dropout:  # torch.dropout(input, p, train): F.dropout's own kernel
            named = dict(zip(("input", "p", "train"), args), **kwargs)
            return self.dropout(named["input"], named["p"], named["train"])
        if func in self.RECURRENT:
            return self._run_fused(func, args, kwargs, lambda output: (
                [tensor for tensor in _tensors(args) if tensor.is_floating_point()]
                + [output[0]], 0))
        return func(*args, **kwargs)

    def dropout(self, input: torch.Tensor, p: float = 0.5, training: bool = True,
                inplace: bool = False) -> torch.Tensor:
        if training and not inplace and 0 < p < 1:
            return torch.native_dropout(input, p, True)[0]
        return self.original_dropout(input, p, training, inplace)

    def counted(self, *args, **kwargs) -> torch.Tensor:
        query, key, value = [*args, *(kwargs[name] for name in ("query", "key", "value")
                                      if name in kwargs)][:3]
        self.inside = True
        try:
            return self._run_fused(self.original, args, kwargs, lambda output: (
                [query, key, value, output], query.shape[:-1].numel() * 4))
        finally:
            self.inside = False

    def _run_fused(self, func, args, kwargs, kept) -> object:
        """`func` run with its own saved tensors held apart; `kept(output)`: the
        tensors counted of it, and the bytes of its log-sum-exps."""
        own = _Held()
        with torch.autograd.graph.saved_tensors_hooks(own.pack, _Saved.unpack):
            output = func(*args, **kwargs)
        if any(tensor.requires_grad for tensor in _tensors(output)):
            tensors, extra_bytes = kept(output)
            self.fused.append((own, [tensor.detach() for tensor in tensors], extra_bytes))
        return output

    def alive(self) -> list[torch.Tensor]:
        """The counted tensors of the ops whose saved tensors the graph still holds."""
        return [tensor for own, tensors, _ in self.fused if own.any_alive()
                for tensor in tensors]

    def log_sum_exp_bytes(self) -> int:
        return sum(extra for own, _, extra in self.fused if own.any_alive())


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in `value`, a tensor or a (nested) tuple or list of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


def _storage_bytes(tensors: list[torch.Tensor]) -> list[int]:
    """Each distinct storage's bytes once: tied weights count once."""
    return list({tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes()
                 for tensor in tensors}.values())
