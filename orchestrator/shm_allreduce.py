"""Allreduce through the node's shared memory, for CPU workers on one machine.

gloo carries every message over a TCP socket, also between two processes on
one machine, where a gradient allreduce is then mostly latency
(bench/notes/sync_strategies.md has the figures). Here every worker copies
its tensor into its own slot of a file in /dev/shm that all of them map,
sums its 1/k of every slot into a shared result, and copies the whole result
back: a reduce-scatter and an allgather, in memory, as NCCL does within a node.

Workers signal each phase by bumping a counter of their own in the mapping
and poll the others' counters, with `sched_yield` between polls (see
`collectives.wait_busy` for why not block). One writer per counter needs no
atomic operations, but it needs stores to become visible in program order,
the data before the counter that announces it: x86-64 guarantees that, ARM
does not, and Python has no memory fence. So this runs on x86-64 only;
elsewhere, or when the workers do not share a node, `connect` says so and
the caller keeps gloo.
"""

import mmap
import os
import platform
import secrets
import tempfile
import time
from pathlib import Path

import torch

from orchestrator.collectives import gather_strings, get_rank, get_world_size

CACHE_LINE_BYTES = 64
# Each worker's counter sits on its own cache line, so a worker polling the
# others' counters does not slow the one writing its own.
_INT64_PER_LINE = CACHE_LINE_BYTES // 8
# How long a worker waits between checks that its peers are still alive.
_LIVENESS_CHECK_INTERVAL_S = 1.0
# A live peer that never arrives (stuck, or failed without exiting) ends the
# wait after what torch.distributed's default collective timeout allows.
WAIT_TIMEOUT_S = 30 * 60


class PeerExitedError(RuntimeError):
    """A worker died while the others waited for it in an allreduce."""


class PeerTimeoutError(TimeoutError):
    """A worker did not reach an allreduce within `WAIT_TIMEOUT_S`."""


class SharedMemoryAllreduce:
    """Sums tensors over the workers of one node; build it with `connect`."""

    def __init__(self, mapping: mmap.mmap, *, rank: int, num_workers: int, capacity_bytes: int,
                 peer_pids: list[int]):
        self.rank, self.num_workers, self.capacity_bytes = rank, num_workers, capacity_bytes
        self._peer_pids = peer_pids
        self.wait_timeout_s = WAIT_TIMEOUT_S
        self._counters = memoryview(mapping)[:_header_bytes(num_workers)].cast("q")
        self._mapping = mapping
        self._views: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._phase = 0

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
        name, mapping = f"orchestrator-allreduce-{secrets.token_hex(16)}", None
        supported = stores_in_program_order()
        if rank == 0 and supported:
            mapping = _create(directory / name, size)
        # Each worker looks for rank 0's file in its own node's folder (a
        # node-local tmpfs): on another node it finds none.
        created, name = gather_strings(f"{mapping is not None} {name}")[0].split()
        if rank != 0 and created == "True" and supported:
            mapping = _attach(directory / name, size)
        outcomes = gather_strings(f"{os.getpid()}" if mapping is not None else "")
        if rank == 0 and mapping is not None:
            os.unlink(directory / name)
        if not all(outcomes):
            if mapping is not None:
                mapping.close()
            return None
        return cls(mapping, rank=rank, num_workers=num_workers, capacity_bytes=capacity_bytes,
                   peer_pids=[int(pid) for pid in outcomes])

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the workers, in place; every worker ends with the same bits.

        Every element is summed by one worker, in rank order, and copied to
        all: the workers agree exactly, as gloo's allreduce makes them.
        """
        dense = tensor if tensor.is_contiguous() else tensor.contiguous()
        flat = dense.view(-1)
        slots, result = self._views_of(tensor.dtype)
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
        start, stop = _share(size, self.rank, self.num_workers)
        mine = result[start:stop]
        torch.sum(slots[:, start:stop], dim=0, out=mine)
        # Phase 2: every share of the result is summed.
        self._arrive_and_wait()
        piece.copy_(result[:size])

    def _arrive_and_wait(self) -> None:
        self._phase += 1
        counters, phase = self._counters, self._phase
        counters[self.rank * _INT64_PER_LINE] = phase
        started = time.monotonic()
        next_check = started + _LIVENESS_CHECK_INTERVAL_S
        for peer in range(self.num_workers):
            while counters[peer * _INT64_PER_LINE] < phase:
                os.sched_yield()
                if time.monotonic() > next_check:
                    self._require_alive(peer, waited_s=time.monotonic() - started)
                    next_check = time.monotonic() + _LIVENESS_CHECK_INTERVAL_S

    def _require_alive(self, peer: int, *, waited_s: float) -> None:
        # gloo notices a dead peer by its closed socket; here nothing would,
        # and the survivors would spin forever.
        pid = self._peer_pids[peer]
        if not _is_running(pid):
            raise PeerExitedError(f"worker {peer} (pid {pid}) exited during an allreduce; "
                                  f"worker {self.rank} stops waiting for it")
        if waited_s > self.wait_timeout_s:
            raise PeerTimeoutError(f"worker {peer} (pid {pid}) did not reach the allreduce in "
                                   f"{waited_s:.0f} s; worker {self.rank} stops waiting for it")

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


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists; it is not ours to signal
    try:
        # A dead process its parent has not reaped yet still answers kill.
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc here: the signal's answer stands


def stores_in_program_order() -> bool:
    """Whether this CPU shows other cores its stores in program order (x86-64)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def _header_bytes(num_workers: int) -> int:
    """The workers' counters, one cache line each."""
    return num_workers * CACHE_LINE_BYTES


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _share(size: int, rank: int, num_workers: int) -> tuple[int, int]:
    """Rank's [start, stop) of `size` elements split as evenly as possible."""
    return size * rank // num_workers, size * (rank + 1) // num_workers


def _create(path: Path, size: int) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        # Reserve the pages now: a mapping past a full /dev/shm (a container's
        # default is 64 MB) would otherwise die of SIGBUS on first touch.
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        mapping = mmap.mmap(fd, size)
    except OSError:
        os.unlink(path)
        return None
    finally:
        os.close(fd)
    return mapping


def _attach(path: Path, size: int) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        mapping = mmap.mmap(fd, size)
    except (OSError, ValueError):  # ValueError: the file is shorter than `size`
        return None
    finally:
        os.close(fd)
    return mapping
