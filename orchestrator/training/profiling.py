"""`--profile-steps N`: N training steps of a run's first epoch under torch.profiler,
on every worker: where a step's time goes, op by op (and kernel by kernel on a GPU).

Each worker keeps a summary (`summary`: the top ops by self time a step, and on a
GPU the kernels a step and the device's busy time in it: a step far from busy is
bound by its launches, not by arithmetic) and a Chrome trace of its steps, which
Perfetto (ui.perfetto.dev) or TensorBoard opens; the loop gathers the summaries on
rank 0 into the epoch's row and the driver writes them to profile.csv and
report.md. The window (`window`) starts after the steps that pay one-off costs
(cuDNN's search, a CUDA graph's warm-up and capture) and ends before the first
evaluation. The first epoch is outside every time per epoch of the report (the
epochs after the first: report/summary.py `steady_epochs`), so the profiler's own
overhead there times none of them; a one-epoch run's time, a time to a target
accuracy and a proportional split's next shares include its overhead in the
profiled steps (the profiler's start and stop are left out, as evaluations are).

Started from a thread other than the process's first (a Ray Train worker runs
the loop in one), kineto prints "External init callback must run in same thread
as registerClient" once: the client init it then skips is torch's, which is empty.

Nothing here may import ray (loop.py runs without it).
"""

import gzip
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import profiler

from orchestrator.training.sync.collectives import gather_strings, get_rank

# Where the table of a step's ops stops: the rest is in the trace.
TOP_OPS = 10
# Steps that pay a run's one-off costs and are left out of the window: the first
# step (cuDNN's search for its convolutions, autograd's and the allocator's first
# allocations), and with a graphed step its eager warm-up steps and the capture.
FIRST_STEPS = 1
# The name each profiled step's span has in the trace, as torch.profiler's schedule
# names them: its total counts the whole step, no op of its own.
STEP_EVENT = "ProfilerStep"
# Called with a worker's trace (a local file of its own) and its rank; returns where
# the trace is kept (worker.py: in its Train run's folder). Without one it stays where
# it is.
KeepTrace = Callable[[str, int], str]


def window(steps_per_epoch: int, evaluate_after: set[int], skip: int,
           requested: int) -> range:
    """Which steps (from 0) of the first epoch to profile: the last `requested`
    before the first mid-epoch evaluation (or the epoch's end) that are not among
    the `skip` first; fewer where the epoch has not that many; none where it has
    no step beyond the skipped ones."""
    end = min([steps_per_epoch, *(steps for steps in evaluate_after if steps > 0)])
    return range(max(skip, end - requested), end)


class StepProfiler:
    """torch.profiler around the steps of `steps` (a `window`), called after each step."""

    def __init__(self, device: torch.device, steps: range):
        self.device, self.steps = device, steps
        self.summary: dict | None = None
        self.trace: Path | None = None
        self._profile: profiler.profile | None = None
        self._stopped: profiler.profile | None = None
        self._start = 0.0
        self._seconds = 0.0
        self._steps = 0
        self._span: profiler.record_function | None = None
        # Seconds the profiler's start and stop took and no one took yet (`take_overhead_s`).
        self._overhead_s = 0.0

    def before_step(self, step: int) -> None:
        if step == self.steps.start and self.steps:
            self._start_profile()
        if self._profile is not None:
            self._span = profiler.record_function(f"{STEP_EVENT}#{step}")
            self._span.__enter__()

    def _start_profile(self) -> None:
        activities = [profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(profiler.ProfilerActivity.CUDA)
            # The steps before, still queued on the device, are training: waited
            # for before the profiler's own time starts.
            torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        # Kineto's own log lines (an error where a CUDA build has no GPU) stay off.
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        self._profile = profiler.profile(activities=activities)
        self._profile.__enter__()
        self._start = time.perf_counter()
        self._overhead_s += self._start - started

    def after_step(self, step: int) -> None:
        if self._profile is None:
            return
        self._span.__exit__(None, None, None)
        self._span = None
        self._steps += 1
        if step == self.steps.stop - 1:
            self._stop()

    def stop(self) -> None:
        """The profiler off where the epoch left the window (a step that raised or
        diverged, the target reached mid-epoch); nothing summarised or exported. An
        error of its own (the device's, after a step that raised) is not raised over
        the step's: the window is then lost."""
        try:
            if self._span is not None:  # a step that raised
                self._span.__exit__(None, None, None)
                self._span = None
            if self._profile is not None:
                self._stop()
        except Exception:  # noqa: BLE001 - the window lost, the run's own error raised
            self._span = self._profile = self._stopped = None

    def finish(self) -> None:
        """After the epoch (its time not counting this): `summary` and `trace` of the
        steps the window saw (none: both stay None). Profiling never ends a run: where
        summarising fails, the summary holds the steps' wall time and says why in its
        `error`; where exporting the trace fails, the summary is kept and says so."""
        self.stop()
        if self._stopped is None or not self._steps:
            return
        profile, self._stopped = self._stopped, None
        errors = []
        try:
            self.summary = summary(profile.key_averages(), profile.events(),
                                   steps=self._steps, seconds=self._seconds,
                                   device=self.device)
            errors.append(self.summary["error"])
        except Exception as error:  # noqa: BLE001 - reported, and training goes on
            self.summary = _wall_time(self.device, self._steps, self._seconds)
            errors.append(f"not summarised: {type(error).__name__}: {error}")
        try:  # the trace, which may show what the summary could not
            self.trace = _export(profile)
        except Exception as error:  # noqa: BLE001 - reported, and training goes on
            errors.append(f"no trace written: {type(error).__name__}: {error}")
        self.summary["error"] = "; ".join(filter(None, errors)) or None

    def _stop(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        stopped = time.perf_counter()
        self._seconds = stopped - self._start
        self._stopped, self._profile = self._profile, None
        self._stopped.__exit__(None, None, None)
        self._overhead_s += time.perf_counter() - stopped

    def take_overhead_s(self) -> float:
        """The seconds the profiler's start and stop took since the last call: no
        training, left out of the epoch's time (and a mid-epoch evaluation's)."""
        seconds, self._overhead_s = self._overhead_s, 0.0
        return seconds


def on_device(row) -> bool:
    """Whether a profiler event (or averaged row) is the device's own work: a kernel,
    a copy or a fill, not a host op, and not a `record_function` span mirrored onto
    the device's timeline (torch's tables leave those out of device time too)."""
    return (row.device_type != torch.autograd.DeviceType.CPU
            and not getattr(row, "is_user_annotation", False))


def summary(averages, events, *, steps: int, seconds: float,
            device: torch.device) -> dict:
    """A profiled window's numbers a step: its wall time; the `TOP_OPS` ops by self
    time, each with its calls and its self time on the CPU and on the device: on a
    CPU the host's ops, on a GPU the device's kernels (a host op's device time is
    its kernels', counted once so); on a GPU also the kernels (copies and fills
    included) and the device's busy time: the union of their intervals (`busy_us`),
    NCCL's among them, whose kernels overlap the others' and hold the wait for
    the other ranks, apart in `nccl_busy_ms`. A GPU whose kernels were not recorded
    has its host ops ranked, and its `error` says so."""
    rows = [row for row in averages if not row.key.startswith(STEP_EVENT)]
    work = [event for event in events if on_device(event)]
    # A GPU whose kernels the profiler did not see (CUPTI not started in this
    # process): its host ops are ranked, and the summary says why.
    kernels_seen = device.type == "cuda" and bool(work)
    if kernels_seen:
        ranked = sorted((row for row in rows if on_device(row)), reverse=True,
                        key=lambda row: row.self_device_time_total)
    else:
        ranked = sorted((row for row in rows
                         if row.device_type == torch.autograd.DeviceType.CPU),
                        reverse=True, key=lambda row: row.self_cpu_time_total)
    result = _wall_time(device, steps, seconds)
    result["ops"] = [{"op": row.key, "calls": row.count / steps,
                      "self_cpu_ms": row.self_cpu_time_total / 1e3 / steps,
                      "self_device_ms": row.self_device_time_total / 1e3 / steps}
                     for row in ranked[:TOP_OPS]]
    if kernels_seen:
        spans = [(event.time_range.start, event.time_range.end) for event in work]
        nccl = [span for span, event in zip(spans, work) if "nccl" in event.name.lower()]
        result |= {"kernels": len(work) / steps,
                   "device_busy_ms": busy_us(spans) / 1e3 / steps,
                   "nccl_busy_ms": busy_us(nccl) / 1e3 / steps}
    elif device.type == "cuda":
        result["error"] = ("no kernel recorded on the device (the profiler's CUDA "
                           "activity did not start in this process): host ops ranked")
    return result


def _wall_time(device: torch.device, steps: int, seconds: float) -> dict:
    """A summary's every key, with the window's wall time a step and nothing else
    known: what a summary that failed keeps."""
    return {"device": str(device), "steps": steps, "step_ms": 1e3 * seconds / steps,
            "ops": [], "kernels": None, "device_busy_ms": None, "nccl_busy_ms": None,
            "error": None}


def busy_us(spans: list[tuple[float, float]]) -> float:
    """The time (µs) covered by at least one of `spans` (start, end): kernels of
    several streams overlapping count once."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _export(profile: profiler.profile) -> Path:
    """The window's Chrome trace, gzipped (Perfetto and TensorBoard read it so),
    in a temporary folder of this process's."""
    folder = Path(tempfile.mkdtemp(prefix="d2l-profile-"))
    plain = folder / "trace.json"
    profile.export_chrome_trace(str(plain))
    packed = folder / "trace.json.gz"
    with plain.open("rb") as source, gzip.open(packed, "wb") as target:
        shutil.copyfileobj(source, target)
    plain.unlink()
    return packed


def trace_name(rank: int) -> str:
    """A worker's trace in the run's folder: Perfetto and TensorBoard's plugin know
    `.pt.trace.json.gz`."""
    return f"rank{rank}.pt.trace.json.gz"


def gathered(profile: StepProfiler, keep_trace: KeepTrace | None) -> str:
    """After the profiled epoch, on every rank: each rank's summary with where its
    trace is kept, in rank order (a rank whose window held no step: null), as JSON:
    the epoch's `profile`."""
    profile.finish()
    mine = None
    if profile.summary is not None:
        trace = str(profile.trace) if profile.trace is not None else None
        if keep_trace is not None and trace is not None:
            trace = keep_trace(trace, get_rank())
        mine = {"rank": get_rank(), **profile.summary, "trace": trace}
    return "[" + ", ".join(gather_strings(json.dumps(mine))) + "]"
