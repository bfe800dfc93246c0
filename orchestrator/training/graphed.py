"""The training step captured once as a CUDA graph and replayed every step after.

Eager, a step on a GPU is bound by the host launching its kernels one by one:
on an H200 ResNet-18's step at batch 256 takes 11.2 ms in fp32 and the same in
bfloat16, LeNet's 2.2 ms for a few microseconds of arithmetic. Replayed as one
graph, the launches are gone: ResNet-18 10.7 ms in fp32, 4.97 ms in bfloat16 with
channels-last, LeNet 0.58 ms (bench/gpu_step.py, bench/notes/gpu_step.md).

How (PyTorch's whole-network capture, docs "CUDA Graphs"): the batch's indices go
into a static buffer the graph gathers from; the first WARMUP_STEPS steps run
eagerly on a side stream (cuDNN's search, the optimizer's momentum buffers and
autograd's lazy state are made there, not captured); the next step is captured
and then replayed, as is every step after. Each of those steps trains on its own
batch: the warm-up steps are the run's own, nothing is trained twice.

Where it applies (`off_reason`): a CUDA device, one worker (the sums of several
stay eager: NCCL's can be captured, gloo's cannot, and neither was run here on
several GPUs), no sweep that times it against several workers' steps under
`auto` (SweepConfig.graph_held_off), a sync whose one-worker step is the plain
SGD step (scratch, bucketed, root), fixed shapes (every batch is full: the loop drops the
partial last one), and the book's models: your own model is captured only
with `--cuda-graph on`, since a replay repeats its kernels and nothing of its
Python (a counter, an attribute rebound each step, Python's `random` would be
frozen at the capture). A capture that fails falls back to the eager step, the
current stream restored and the gradients it left cleared, and says why in
`state`. On the torch the GPU machines have (2.11) its memory pool stays
reserved (torch frees a pool only after a capture that ended), and before 2.12
a capture whose end failed also left the device allocator routing to that
pool, as if the capture were still underway (pytorch#180395): every
`torch.cuda.empty_cache()` after it, and the allocator's own retry when memory
runs out, then failed an internal assert. There the failed capture's routing
is ended here (`_end_routing`), the one call below torch's public API; from
2.12 torch ends it itself, and a second end would come from the graph's
destructor. (The pinned host allocator's routing, which 2.11 leaves on too,
has no call to end it; nothing here pins memory.)
"""

from collections.abc import Callable

import torch

from orchestrator.config.options import TrainConfig
from orchestrator.errors import named_first_line
from orchestrator.training.models import is_reference

WARMUP_STEPS = 3
GRAPHED_SYNCS = ("scratch", "bucketed", "root")
ON = "on"
WARMING_UP = "on (warming up)"  # no step captured yet: each runs eagerly


def off_reason(config: TrainConfig, device: torch.device,
               held: str | None = None) -> str | None:
    """None where the run's step is captured, else why it is not (epochs.csv's
    `step_graph`). `held`: why the run's sweep holds `auto` off
    (SweepConfig.graph_held_off)."""
    if config.cuda_graph == "off":
        return "off: --cuda-graph off"
    if config.cuda_graph == "auto" and is_reference(config.model):
        return "off: your own model (--cuda-graph on captures it)"
    if config.cuda_graph == "auto" and held:
        return f"off: {held}"
    if device.type != "cuda":
        return f"off: not a CUDA device ({device.type})"
    if config.num_workers > 1:
        return "off: several workers (their sums run eagerly)"
    if config.accumulation_steps > 1:
        return "off: gradient accumulation (--accumulation-steps)"
    if config.precision == "fp16":
        return "off: fp16 (its loss scale reads each step's verdict on the host)"
    if config.sync not in GRAPHED_SYNCS:
        return f"off: sync {config.sync}"
    return None


class GraphedStep:
    """Calls `body(index)` (one whole training step on the batch of `index`, returning
    its outputs) eagerly for the first WARMUP_STEPS calls, then captures it once and
    replays the capture: the outputs are then the same tensors every step, rewritten
    by each replay, to be read before the next. `clear()` clears the gradients a
    failed capture left behind. Each step is timed by `timer` (timing.DeviceTimer),
    the capture itself not."""

    def __init__(self, body: Callable[[torch.Tensor], tuple], clear: Callable[[], None],
                 batch_size: int, device: torch.device):
        self.body, self.clear = body, clear
        self.index = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.side = torch.cuda.Stream(device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: tuple | None = None
        self.warm_steps = 0
        self.state = WARMING_UP

    def __call__(self, index: torch.Tensor, timer) -> tuple:
        self.index.copy_(index)
        if self.state == WARMING_UP and self.warm_steps == WARMUP_STEPS:
            self._capture()
        started = timer.start()
        outputs = self._run()
        timer.stop(started)
        return outputs

    def _run(self) -> tuple:
        if self.graph is not None:
            self.graph.replay()
            return self.outputs
        if self.state != WARMING_UP:  # the capture failed: eager from then on
            return self.body(self.index)
        self.warm_steps += 1
        current = torch.cuda.current_stream()
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            outputs = self.body(self.index)
        current.wait_stream(self.side)
        return outputs

    def _capture(self) -> None:
        """Capture the step once (it runs nothing: the replay that follows trains
        this batch); on failure, leave the eager step in a clean state."""
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream()
        # The graph's own pool and device, named here: after a failed capture torch
        # will not say them (a capture is made on the current device).
        pool, device_index = torch.cuda.graph_pool_handle(), torch.cuda.current_device()
        try:
            # thread_local: a Ray worker's other threads may touch CUDA meanwhile.
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outputs = self.body(self.index)
        except Exception as error:  # the step runs eagerly; the record says why
            torch.cuda.set_stream(stream)  # a failed capture does not restore it
            _end_routing(device_index, pool)
            while error.__context__ is not None:  # the cause, not capture_end's echo
                error = error.__context__
            self.state = f"off: capture failed ({named_first_line(error)[:200]})"
            self.clear()
            return
        self.graph, self.outputs, self.state = graph, outputs, ON


def _end_routing(device_index: int, pool) -> None:
    """End the device allocator's routing to a failed capture's `pool`, which torch
    before 2.12 left on (pytorch#180395: `capture_end` raised before ending it). A
    routing torch ended already, and a torch built without CUDA, raise RuntimeError
    here: nothing to end."""
    if torch.__version__ >= (2, 12):
        return
    try:
        torch._C._cuda_endAllocateToPool(device_index, pool)
    except (AttributeError, RuntimeError):
        pass
