"""What a run records, in the one vocabulary every layer reads: how an epoch or a
trial ended, the columns kept of each epoch and evaluation, and the lines that
print them. Plain Python: the workers write these records, the driver collects
and prints them, the report reads them back from files.
"""

import dataclasses
import enum
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class Status(str, enum.Enum):
    """How an epoch ended (`OK` or `DIVERGED`, from the loop) and how a trial ended
    (every member but `OK`, from the report's summary); written as the value."""

    OK = "ok"
    DIVERGED = "diverged"  # a non-finite gradient, or a loss past DIVERGED_LOSS_FACTOR
    FINISHED = "finished"
    STOPPED_EARLY = "stopped early"  # by ASHA
    REACHED_TARGET = "reached target"  # ended there by --stop-at-target
    FAILED = "failed"  # its worker group ran out of --max-failures restarts
    INTERRUPTED = "interrupted"  # the sweep stopped before this trial ended: --resume finishes it

    def __str__(self) -> str:
        return self.value


# calibration.json's transport of `sharded`'s two collectives, timed as one:
# "<group> reduce-scatter + all-gather" (gloo's reduce-scatter is no ring).
SHARDED_PAIR = "reduce-scatter + all-gather"
# --sync root's transport, and calibration.json's: "<group> root", the book's
# allreduce through worker 0 over the group's sends and receives.
ROOT_FUNNEL = "root"
# The strategies whose sums CPU workers on one node may take through the node's
# shared memory (make_transport with shared_memory on; the others sum over the
# process group): what the plan, the calibration and the scaling model read.
SHARED_MEMORY_SYNCS = ("scratch", "bucketed")
# Reading a value off a GPU waits for every queued step and then idles it, so
# there the non-finite-gradient count is read only every this many steps: a
# diverged run may take that many more steps to stop (bench/notes/gpu.md),
# its weights by then not finite; elsewhere it is read every step. `sharded`
# sums its workers' counts when it reads them: a one-element allreduce.
FINITE_CHECK_INTERVAL_STEPS = {"cuda": 25}
# What each epoch row of epochs.csv keeps of a worker's report.
# sync_in_flight_s: each collective's launch to completion; above sync_time_s (what the
# steps waited) only where communication ran behind computation (--sync delayed).
# worker_sync_s: each rank's sync_time_s (sync_time_s is rank 0's), each of which
# includes waiting for the others; sync_least_s: step by step the least any rank
# waited, summed: the sums' own time (CPU workers only; NaN on GPUs and 1 worker).
# step_graph: "on" where the step ran as a replayed CUDA graph, else "off: <why>"
# (training/graphed.py).
# backend: the process group's (nccl, gloo; "none" in a group of one) beside the
# transport the sums went over: GPU workers that share a device sum over gloo.
# run_started_unix_s, started_unix_s, ended_unix_s: when the worker group began its
# loop, and when the epoch began and ended (report/timeline.py: the sweep's time line
# and where its time went).
# peak_memory_mb: on a GPU, the most memory the first worker's tensors held at once
# from the run's model on (torch.cuda.max_memory_allocated, MiB: the allocator's cache
# and `auto`'s layout timing before the run left out; the data set on the device and
# evaluations in); NaN on CPUs.
# grad_sq_shard, grad_sq_batch, noise_shard_examples: the gradient noise scale's
# measurements (training/step_metrics.py GradientNoise; report/noise_scale.py), NaN where
# the strategy does not expose them.
# accumulation_steps: the micro-batches each worker's shard of a step went through
# forward and backward in, their gradients summed once (--accumulation-steps).
# loss_scale, skipped_steps: --precision fp16's loss scale at the epoch's end and the
# steps it skipped in the epoch, their gradients not finite (training/loss_scale.py);
# NaN and 0 in the other precisions.
EPOCH_COLUMNS = ["epoch", "train_loss", "train_acc", "test_acc", "epoch_time_s",
                 "samples_per_s", "sync_time_s", "sync_in_flight_s", "eval_time_s", "train_s",
                 "wall_s",
                 "num_workers", "global_batch_size", "batch_size_per_worker",
                 "accumulation_steps", "worker_shares",
                 "worker_compute_s", "worker_sync_s", "sync_least_s", "lr", "momentum", "sync",
                 "split", "precision",
                 "memory_format", "layout_nchw_step_s", "layout_channels_last_step_s",
                 "step_graph", "transport", "backend", "model", "dataset", "device", "devices",
                 "worker_nodes",
                 "status", "run_started_unix_s", "started_unix_s", "ended_unix_s",
                 "peak_memory_mb", "grad_sq_shard", "grad_sq_batch", "noise_shard_examples",
                 "loss_scale", "skipped_steps"]
# What each row of evaluations.csv keeps: one per evaluation of the test set.
EVALUATION_COLUMNS = ["epoch", "test_acc", "train_s", "wall_s", "eval_s"]


@dataclass(frozen=True)
class LeftOut:
    """A preset's grid point this cluster cannot hold: not run, named in the plan
    and in report.md with the scaling model's what-if for it (one per cell: the
    seeds' replicas are one line)."""

    num_workers: int
    global_batch_size: int
    batch_size_per_worker: int
    lr: float
    model: str
    sync: str
    precision: str
    threads_per_worker: int
    part: str
    reason: str
    """e.g. "2 workers need 2 GPUs; this cluster has 1: not run"."""

    @property
    def line(self) -> str:
        return (f"{f'[{self.part}] ' if self.part else ''}{counted(self.num_workers, 'worker')}, "
                f"global batch {self.global_batch_size} ({self.batch_size_per_worker}/worker), "
                f"lr {self.lr:g}, {self.model}, sync {self.sync}, {self.precision}: "
                f"{self.reason}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "LeftOut":
        return cls(**values)


def epoch_line(metrics: dict, num_epochs: int) -> str:
    return (f"epoch {metrics['epoch']}/{num_epochs}: train loss {metrics['train_loss']:.4f}, "
            f"train acc {metrics['train_acc']:.3f}, test acc {metrics['test_acc']:.3f}, "
            f"{seconds_text(metrics['epoch_time_s'], 2)} s ({metrics['samples_per_s']:.0f} "
            f"samples/s, sync {seconds_text(metrics['sync_time_s'], 2)} s)" + _split_part(metrics)
            + _loss_scale_part(metrics)
            + ("  DIVERGED: non-finite gradients" if metrics["status"] == Status.DIVERGED else ""))


def _loss_scale_part(metrics: dict) -> str:
    """fp16's loss scale at the epoch's end, and the steps it skipped in the epoch."""
    scale = metrics.get("loss_scale", math.nan)
    if scale is None or math.isnan(scale):
        return ""
    skipped = metrics["skipped_steps"]
    return f", loss scale {scale:g}" + (f" ({skipped} skipped)" if skipped else "")


def _split_part(metrics: dict) -> str:
    """Each worker's share of the global batch and its forward+backward seconds."""
    shares, seconds = metrics["worker_shares"], metrics["worker_compute_s"]
    if len(shares) < 2:
        return ""
    return (f", shares {'/'.join(f'{share:g}' for share in shares)} "
            f"computing {'/'.join(f'{time_s:.2f}' for time_s in seconds)} s")


def memory_format_text(metrics: dict) -> str:
    """The memory format a run used, and what `auto` timed, e.g. `channels-last (auto: NCHW
    0.112 s, channels-last 0.083 s a step)`; the timings are None, or NaN in a frame, when
    --memory-format named the format."""
    nchw_s, channels_last_s = metrics["layout_nchw_step_s"], metrics["layout_channels_last_step_s"]
    if nchw_s is None or math.isnan(nchw_s):
        return metrics["memory_format"]
    return (f"{metrics['memory_format']} (auto: NCHW {nchw_s:.3g} s, channels-last "
            f"{channels_last_s:.3g} s a step)")


def step_graph_text(metrics) -> str:
    """", step replayed as a CUDA graph" where a run's step was one (training/graphed.py);
    nothing otherwise, and for records from before the column."""
    return ", step replayed as a CUDA graph" if metrics.get("step_graph") == "on" else ""


def memory_text(history: list[dict], floor_mb: float | None = None) -> str:
    """", the first worker's peak memory 1.26GB (its step's floor 734MB)": its peak
    on a GPU (`peak_memory_mb`) beside the least its step must hold
    (training/memory.py; None or NaN: not counted); nothing on CPUs."""
    peaks = [row.get("peak_memory_mb") for row in history]
    peaks = [peak for peak in peaks if peak is not None and not math.isnan(peak)]
    if not peaks:
        return ""
    floor = (f" (its step's floor {bytes_text(floor_mb * 2**20)})"
             if floor_mb is not None and not math.isnan(floor_mb) else "")
    return f", the first worker's peak memory {bytes_text(max(peaks) * 2**20)}{floor}"


def bytes_text(count: float) -> str:
    """"1.37GB", "35.5kB": powers of 1000 (torch's and nvidia-smi's MiB are 1.05MB)."""
    return f"{si_text(count)}B"


def si_text(value: float) -> str:
    """3 significant digits and an SI prefix: 13.1k, 833M, 1M (999,600), 100."""
    value = float(f"{value:.3g}")
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g}{prefix}"
    return f"{value:.3g}"


def evaluation_line(metrics: dict) -> str:
    """A mid-epoch evaluation (--evals-per-epoch)."""
    return (f"  at epoch {metrics['epoch']:.2f}: test acc {metrics['test_acc']:.3f} "
            f"after {seconds_text(metrics['train_s'])} s of training")


def counted(count: float, noun: str) -> str:
    """"1 worker", "2 workers", "0.5 GPUs": a count and its noun, in the number the
    count takes (every noun here takes its plural with an s)."""
    number = int(count) if float(count).is_integer() else f"{count:g}"
    return f"{number} {noun}" if count == 1 else f"{number} {noun}s"


def seconds_text(seconds: float, decimals: int = 1) -> str:
    """`seconds` to `decimals` decimals, or to two significant digits where those
    would show fewer: a quick sweep's 0.068 and 0.13 s are not both 0.1 s."""
    if seconds >= 10 ** (1 - decimals) or seconds == 0:
        return f"{seconds:.{decimals}f}"
    return f"{seconds:.2g}"


def book_line(history: list[dict]) -> str:
    """The line the book prints after training, e.g.
    `test acc: 0.84, 3.1 sec/epoch on 2 workers [cpu, cpu]`."""
    last = history[-1]
    seconds_per_epoch = statistics.fmean(row["epoch_time_s"] for row in history)
    return (f"test acc: {last['test_acc']:.2f}, {seconds_text(seconds_per_epoch)} sec/epoch "
            f"on {counted(last['num_workers'], 'worker')} {last['devices']}")


def first_reaching(evaluations: list[dict], target_acc: float) -> dict | None:
    """Time to accuracy of one run: the earliest evaluation at or above
    `target_acc`, None if none got there. An evaluation row holds `epoch`
    (a fraction mid-epoch), `test_acc`, `train_s` (training seconds so far, no
    evaluation in them) and `wall_s` (seconds since the run started: worker
    start-up, evaluations and checkpoints included)."""
    return next((row for row in sorted(evaluations, key=lambda row: row["epoch"])
                 if row["test_acc"] >= target_acc), None)


def target_line(evaluations: list[dict], target_acc: float) -> str:
    """One line on when a run reached `target_acc`, e.g. `reached test acc 0.80 after
    1.75 epochs: 15.7 s of training, 24.1 s from the start`."""
    reached = first_reaching(evaluations, target_acc)
    if reached is None:
        last = max(evaluations, key=lambda row: row["epoch"], default=None)
        return (f"did not reach test acc {target_acc:g}" + (
            f" in {counted(round(last['epoch'], 2), 'epoch')} "
            f"({seconds_text(last['train_s'])} s of training)" if last else ""))
    return (f"reached test acc {target_acc:g} after "
            f"{counted(round(reached['epoch'], 2), 'epoch')}: "
            f"{seconds_text(reached['train_s'])} s of training, "
            f"{seconds_text(reached['wall_s'])} s from the start")


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write to a temporary sibling, then rename: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
