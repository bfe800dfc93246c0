"""`--memory-format auto`: the faster memory layout of a run's model, measured on its devices.

Each worker times a few training steps of the run's own model in each layout
(NCHW and channels-last) on its device, the two alternated; the workers sum
their timings and every one takes the layout with the smaller sum, so all
workers of a run use the same one. A node keeps its workers' timings for the
sweep's lifetime (`cached_step_s`), so only a sweep's first trial of each
model, precision, batch and device kind pays for them. Nothing here imports ray.
"""

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from orchestrator.config.options import TrainConfig
from orchestrator.training.sync.collectives import allreduce_, get_world_size
from orchestrator.training.timing import DeviceTimer

FORMATS = ("nchw", "channels-last")
TORCH_FORMATS = {"nchw": torch.contiguous_format, "channels-last": torch.channels_last}
# Timed steps per layout, after an untimed warm-up step each (first-call
# allocations, cuDNN's search; a CUDA graph's: its eager steps, its capture and
# a replay). Measured on the 2-core EPYC, one thread: all 18 steps cost 1.0 s
# for LeNet at batch 256, 0.45 s at 128; 8 s for ResNet-18 at 32 (once a sweep
# per batch, node and device kind).
MEASURED_STEPS = 8
# Fewer timed steps where a step is slow, at least one a layout: as many as fit
# this many seconds by the last warm-up step's time (which, paying first-call work,
# may overestimate it). ResNet-18 at batch 256 on one CPU core takes about 8 s a
# step: 18 steps were 2.4 minutes of the exercises' first ResNet-18 trial,
# where 4 take about 30 s; its layouts differed by 18% a step there (6.7 s
# channels-last against 8.2 s NCHW on the 2-core EPYC with AVX-512).
MEASURED_BUDGET_S = 2.0
# Each epoch's metrics: the layout used and the workers' mean seconds per step
# in each layout (None when --memory-format named one).
STEP_S_KEYS = {"nchw": "layout_nchw_step_s", "channels-last": "layout_channels_last_step_s"}

# Runs one training step in the given layout.
Step = Callable[[str], None]


def time_layouts(step: Step, device: torch.device, *, num_steps: int = MEASURED_STEPS,
                 budget_s: float = MEASURED_BUDGET_S, warmup_rounds: int = 1
                 ) -> dict[str, float]:
    """Seconds per `step` in each layout: the layouts alternate, so that a
    machine that slows down meanwhile slows both alike. After `warmup_rounds`
    untimed steps each (a CUDA graph's: its eager warm-up, its capture and a
    replay), `num_steps` timed steps each, fewer (at least one) where they would
    take longer than `budget_s` a layout by the last warm-up round's time."""
    timers = {name: DeviceTimer(device) for name in FORMATS}
    for _ in range(warmup_rounds):
        started = time.perf_counter()
        for name in FORMATS:
            step(name)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        warm_up_s = (time.perf_counter() - started) / len(FORMATS)
    num_steps = max(1, min(num_steps, int(budget_s / max(warm_up_s, 1e-9))))
    for _ in range(num_steps):
        for name in FORMATS:
            started = timers[name].start()
            step(name)
            timers[name].stop(started)
    return {name: timers[name].seconds / num_steps for name in FORMATS}


def agree(step_s: dict[str, float], device: torch.device) -> dict:
    """The layout every worker uses: the smaller of the timings summed over workers
    (NCHW on a tie), with the workers' mean timings, as the epochs record them."""
    totals = allreduce_(torch.tensor([step_s[name] for name in FORMATS], dtype=torch.float64,
                                     device=device)).tolist()
    # Every worker reads the same sums, so every worker takes the same layout.
    faster = "channels-last" if totals[1] < totals[0] else "nchw"
    return {"memory_format": faster, **{STEP_S_KEYS[name]: total / get_world_size()
                                        for name, total in zip(FORMATS, totals)}}


def choose(config: TrainConfig, device: torch.device, measure: Callable[[], dict[str, float]],
           *, scope: str, cache: Path | None = None, graphed: bool = False) -> dict:
    """The run's layout and its timings: `config.memory_format` if it names one
    (no timings), else measured (`measure()`, or this node's cached timings)
    and agreed across workers. `scope` names the sweep whose timings the cache
    keeps; `cache` is its file (default: `cache_path()`); `graphed`: whether
    `measure` times steps replayed as a CUDA graph."""
    if config.memory_format != "auto":
        return {"memory_format": config.memory_format, **dict.fromkeys(STEP_S_KEYS.values())}
    return agree(cached_step_s(cache or cache_path(), scope, cache_key(config, device, graphed),
                               measure), device)


def cache_key(config: TrainConfig, device: torch.device, graphed: bool = False) -> str:
    """What the timings depend on: the model, precision, (micro-)batch per worker, threads,
    device kind (the file is the node's, so on a CPU the kind is the node's CPU) and
    whether the step is a CUDA graph."""
    kind = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return json.dumps([config.model, config.precision, config.micro_batch_size_per_worker,
                       config.threads_per_worker, kind, graphed])


def cached_step_s(path: Path, scope: str, key: str,
                  measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    """`key`'s timings in `path` if `scope` wrote them there, else `measure()`'s, stored.

    The file holds one scope's timings: another sweep on the node starts it
    afresh (two sweeps at once at worst measure again). It is replaced
    whole, so a worker never reads another's half-written file.
    """
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    entries = stored.get("entries", {}) if stored.get("scope") == scope else {}
    if key in entries:
        return entries[key]
    entries[key] = measure()
    # A name of its own per writer: the workers of a node may write at once.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump({"scope": scope, "entries": entries}, file)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return entries[key]


def cache_path() -> Path:
    """This node's file of timings, one per user: /tmp is shared."""
    return Path(tempfile.gettempdir()) / f"d2l-memory-format-{os.getuid()}.json"


def process_scope() -> str:
    """The scope of a run without Ray: this process."""
    return f"process {os.getpid()}"
