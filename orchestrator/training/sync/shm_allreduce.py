"""Allreduce through the node's shared memory, for CPU workers on one machine.

gloo carries every message over a TCP socket, also between two processes on
one machine, where a gradient allreduce is then mostly latency
(bench/notes/sync_strategies.md has the figures). Here every worker copies
its tensor into its own slot of a file in /dev/shm that all of them map,
sums its 1/k of every slot into a shared result, and copies the whole result
back: a reduce-scatter and an allgather, in memory, as NCCL does within a node.

Workers signal each phase by bumping a counter of their own in the mapping
and poll the others' counters, with `sched_yield` between polls (see
`collectives.wait_busy` for why not block) for a short while, then sleeping.
Beside its counter each worker writes what it passes (call number, dtype,
shape), and every worker checks the others' before summing: a mismatch is an
error naming both, as gloo's would be, not a silently wrong sum. Each worker
holds a lock on its own byte of the file; the kernel drops it when the
process ends, however it ends, which tells a dead peer from a slow one in any
PID namespace, and a file whose creator died from one in use. One writer per counter needs no
atomic operations, but it needs stores to become visible in program order,
the data before the counter that announces it: x86-64 guarantees that, ARM
does not, and Python has no memory fence. So this runs on x86-64 only;
elsewhere, or when the workers do not share a node, `connect` says so and
the caller keeps gloo.
"""

import fcntl
import mmap
import os
import platform
import secrets
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from orchestrator.training.sync.collectives import (SPIN_S, gather_strings, get_rank,
                                                    get_world_size)

CACHE_LINE_BYTES = 64
# Each worker's header (its counter, then what it passes) has two cache lines
# of its own, so a worker polling the others' counters does not slow the one
# writing its own.
_SLOT_INT64 = 2 * CACHE_LINE_BYTES // 8
_CALL, _DTYPE, _NUMEL, _NDIM, _SHAPE = 1, 2, 3, 4, 5  # the counter is at 0
_MAX_DIMS = _SLOT_INT64 - _SHAPE
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
FILE_PREFIX = "orchestrator-allreduce-"
# Past `SPIN_S` (collectives.py's, as every wait here) a wait sleeps, longer the
# longer the wait.
MAX_SLEEP_S = 0.01
# How long a worker waits between checks that its peers are still alive.
_LIVENESS_CHECK_INTERVAL_S = 1.0
# Without a process group's own timeout: torch.distributed's default.
WAIT_TIMEOUT_S = 30 * 60
# A file of ours this old, locked by no process, is one whose creator died
# before removing its name (younger: its creator may not have locked it yet).
STALE_AFTER_S = 60.0


class PeerExitedError(RuntimeError):
    """A worker died while the others waited for it in an allreduce."""


class PeerTimeoutError(TimeoutError):
    """A worker did not reach an allreduce within the process group's timeout."""


class MismatchError(RuntimeError):
    """Workers passed different tensors (dtype, shape) or calls to one allreduce."""


class SharedMemoryAllreduce:
    """Sums tensors over the workers of one node; build it with `connect`."""

    def __init__(self, mapping: mmap.mmap, file, *, rank: int, num_workers: int,
                 capacity_bytes: int):
        self.rank, self.num_workers, self.capacity_bytes = rank, num_workers, capacity_bytes
        self.wait_timeout_s = _group_timeout_s()
        self._header = memoryview(mapping)[:_header_bytes(num_workers)].cast("q")
        self._mapping, self._file = mapping, file  # the file holds this worker's lock
        self._views: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._phase = 0
        self._calls = 0

    @classmethod
    def connect(cls, capacity_bytes: int, *, directory: str | None = None
                ) -> "SharedMemoryAllreduce | None":
        """Map one shared buffer on every worker; None on every worker if any cannot.

        A collective call: every worker of the process group makes it, with
        the same `capacity_bytes` (the largest tensor that goes in one piece;
        larger ones go in several). Rank 0 creates the file in its
        `directory` (default /dev/shm, where it exists), the others map it
        from theirs, and rank 0 removes its name once every worker has tried:
        the memory goes when the last worker exits, however it exits.
        """
        rank, num_workers = get_rank(), get_world_size()
        capacity_bytes = _round_up(max(capacity_bytes, CACHE_LINE_BYTES), CACHE_LINE_BYTES)
        size = _header_bytes(num_workers) + (num_workers + 1) * capacity_bytes
        directory = Path(directory or ("/dev/shm" if os.path.isdir("/dev/shm")
                                       else tempfile.gettempdir()))
        name, opened = f"{FILE_PREFIX}{secrets.token_hex(16)}", None
        supported = stores_in_program_order()
        if rank == 0 and supported:
            remove_stale_files(directory)
            opened = _create(directory / name, size)
        # Each worker looks for rank 0's file in its own node's folder (a
        # node-local tmpfs): on another node it finds none.
        created, name = gather_strings(f"{opened is not None} {name}")[0].split()
        if rank != 0 and created == "True" and supported:
            opened = _attach(directory / name, size, rank)
        outcomes = gather_strings("ok" if opened is not None else "")
        if rank == 0 and opened is not None:
            os.unlink(directory / name)
        if not all(outcomes):
            if opened is not None:
                opened[0].close()
                opened[1].close()
            return None
        return cls(*opened, rank=rank, num_workers=num_workers, capacity_bytes=capacity_bytes)

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the workers, in place; every worker ends with the same bits.

        Every element is summed by one worker, in rank order, and copied to
        all: the workers agree exactly, as gloo's allreduce makes them.
        """
        dense = tensor if tensor.is_contiguous() else tensor.contiguous()
        flat = dense.view(-1)
        slots, result = self._views_of(tensor.dtype)
        self._calls += 1
        self._describe(tensor)
        for start in range(0, flat.numel(), result.numel()):
            self._reduce_piece(flat[start:start + result.numel()], slots, result)
        if dense is not tensor:
            tensor.copy_(dense)
        return tensor

    def _reduce_piece(self, piece: torch.Tensor, slots: torch.Tensor, result: torch.Tensor) -> None:
        size = piece.numel()
        slots[self.rank, :size].copy_(piece)
        # Phase 1: every slot holds its worker's piece. A worker that reaches
        # here again has seen every other worker done with phase 2, so no one
        # still reads the slot it overwrites, nor the result.
        self._arrive_and_wait()
        # No peer can write its next call's header before this worker arrives
        # at phase 2, so each header read here describes this call.
        self._require_same_calls()
        start, stop = _share(size, self.rank, self.num_workers)
        mine = result[start:stop]
        torch.sum(slots[:, start:stop], dim=0, out=mine)
        # Phase 2: every share of the result is summed.
        self._arrive_and_wait()
        piece.copy_(result[:size])

    def _describe(self, tensor: torch.Tensor) -> None:
        """This call's number, dtype and shape into this worker's header, before
        its counter announces the call (stores are seen in program order)."""
        base, shape = self.rank * _SLOT_INT64, tensor.shape[:_MAX_DIMS]
        header = self._header
        header[base + _CALL], header[base + _NUMEL] = self._calls, tensor.numel()
        header[base + _DTYPE], header[base + _NDIM] = _DTYPES.index(tensor.dtype), len(shape)
        for dim, extent in enumerate(shape):
            header[base + _SHAPE + dim] = extent

    def _passed(self, rank: int) -> tuple[int, torch.dtype, tuple[int, ...], int]:
        """What `rank` described: call number, dtype, shape and element count."""
        base, header = rank * _SLOT_INT64, self._header
        shape = tuple(header[base + _SHAPE: base + _SHAPE + header[base + _NDIM]])
        return header[base + _CALL], _DTYPES[header[base + _DTYPE]], shape, header[base + _NUMEL]

    def _require_same_calls(self) -> None:
        mine = self._passed(self.rank)
        for peer in range(self.num_workers):
            theirs = self._passed(peer)
            if theirs != mine:
                raise MismatchError(
                    f"allreduce mismatch: worker {self.rank} passed call {mine[0]} with a "
                    f"{mine[1]} tensor of shape {list(mine[2])} ({mine[3]} elements), worker "
                    f"{peer} call {theirs[0]} with a {theirs[1]} tensor of shape "
                    f"{list(theirs[2])} ({theirs[3]} elements)")

    def _arrive_and_wait(self) -> None:
        self._phase += 1
        header, phase = self._header, self._phase
        header[self.rank * _SLOT_INT64] = phase
        started = time.monotonic()
        next_check = started + _LIVENESS_CHECK_INTERVAL_S
        for peer in range(self.num_workers):
            while header[peer * _SLOT_INT64] < phase:
                waited_s = time.monotonic() - started
                if waited_s < SPIN_S:
                    os.sched_yield()
                else:
                    # A stuck peer must not cost a core per waiting worker.
                    time.sleep(min(MAX_SLEEP_S, (waited_s - SPIN_S) / 8))
                if started + waited_s > next_check:
                    self._require_alive(peer, waited_s=waited_s)
                    next_check = time.monotonic() + _LIVENESS_CHECK_INTERVAL_S

    def _require_alive(self, peer: int, *, waited_s: float) -> None:
        # gloo notices a dead peer by its closed socket; here nothing would,
        # and the survivors would wait forever.
        if not _locked_by_another(self._file.fileno(), start=peer, length=1):
            raise PeerExitedError(f"worker {peer} exited during an allreduce; "
                                  f"worker {self.rank} stops waiting for it")
        if waited_s > self.wait_timeout_s:
            raise PeerTimeoutError(f"worker {peer} did not reach the allreduce in "
                                   f"{waited_s:.0f} s (the process group's timeout); "
                                   f"worker {self.rank} stops waiting for it")

    def _views_of(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The k slots and the result region, as `dtype` tensors over the mapping."""
        if dtype not in self._views:
            itemsize = torch.empty((), dtype=dtype).element_size()
            count = self.capacity_bytes // itemsize
            offset = _header_bytes(self.num_workers)
            slots = torch.frombuffer(self._mapping, dtype=dtype, offset=offset,
                                     count=self.num_workers * self.capacity_bytes // itemsize)
            slots = slots.view(self.num_workers, count)
            result = torch.frombuffer(
                self._mapping, dtype=dtype, count=count,
                offset=offset + self.num_workers * self.capacity_bytes)
            self._views[dtype] = slots, result
        return self._views[dtype]


def remove_stale_files(directory: Path) -> None:
    """Remove our files in `directory` that no live process holds: their creator
    died between creating them and removing their name (75 MB for ResNet-18)."""
    for path in directory.glob(f"{FILE_PREFIX}*"):
        try:
            with open(path, "rb+") as file:
                if (time.time() - os.fstat(file.fileno()).st_mtime > STALE_AFTER_S
                        and not _locked_by_another(file.fileno(), start=0, length=0)):
                    path.unlink()
        except OSError:
            continue  # gone meanwhile, or not ours to open


def _locked_by_another(fd: int, *, start: int, length: int) -> bool:
    """Whether another process holds a lock on these bytes (length 0: to the end)."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
    except OSError:
        return True
    fcntl.lockf(fd, fcntl.LOCK_UN, length, start)
    return False


def _group_timeout_s() -> float:
    """The process group's collective timeout, which a stuck peer should cost here too."""
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        return backend.options._timeout.total_seconds()
    except (AttributeError, RuntimeError):  # no group, or a torch without these
        return WAIT_TIMEOUT_S


def stores_in_program_order() -> bool:
    """Whether this CPU shows other cores its stores in program order (x86-64)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def _header_bytes(num_workers: int) -> int:
    """The workers' headers, two cache lines each."""
    return num_workers * _SLOT_INT64 * 8


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _share(size: int, rank: int, num_workers: int) -> tuple[int, int]:
    """Rank's [start, stop) of `size` elements split as evenly as possible."""
    return size * rank // num_workers, size * (rank + 1) // num_workers


def _create(path: Path, size: int):
    """(mapping, file) of a new file, rank 0's byte locked; None if it cannot be made."""
    try:
        file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), "rb+",
                         buffering=0)
    except OSError:
        return None
    try:
        fcntl.lockf(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        # Reserve the pages now: a mapping past a full /dev/shm (a container's
        # default is 64 MB) would otherwise die of SIGBUS on first touch.
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(file.fileno(), 0, size)
        else:
            os.ftruncate(file.fileno(), size)
        return mmap.mmap(file.fileno(), size), file
    except OSError:
        os.unlink(path)
        file.close()
        return None


def _attach(path: Path, size: int, rank: int):
    """(mapping, file) of rank 0's file, this rank's byte locked; None if it cannot be had."""
    try:
        file = open(path, "rb+", buffering=0)
    except OSError:
        return None
    try:
        fcntl.lockf(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, rank)
        return mmap.mmap(file.fileno(), size), file
    except (OSError, ValueError):  # ValueError: the file is shorter than `size`
        file.close()
        return None
