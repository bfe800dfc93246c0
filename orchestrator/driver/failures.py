"""Why a run's training failed, in one line a user can act on.

Ray Train raises `WorkerGroupError` with each failing rank's own exception in
`worker_failures` (its public API; Ray 2.60 unwraps a user error to the
exception the worker raised, and a worker that died, Ray's memory monitor's
kills included, comes as a failed health check whose text holds the death's
cause). The error's own text is a screen of per-rank snippets, cut at Ray's
limit, often before the line that says what went wrong: the user needs each
rank's error once (ranks whose errors differ only in numbers, such as each
GPU's free memory, share one) and, where memory ran out, the most common
failure of a model of one's own, the ways out that apply where it happened.
"""

import re

from orchestrator.config.options import HALF_PRECISIONS
from orchestrator.records import counted

# What torch's CUDA allocator (and CUDA or NCCL allocating outside it), its CPU
# allocator and Ray's memory monitor say.
CUDA_OUT_OF_MEMORY = ("CUDA out of memory", "CUDA error: out of memory", "'out of memory'")
HOST_OUT_OF_MEMORY = ("can't allocate memory", "running low on memory")
# What a rank says where it waited past the process group's timeout: gloo in a
# collective (seen: tests/cluster/test_collective_timeout.py) or connecting to a
# peer, the shared-memory allreduce (sync/shm_allreduce.py), torch's TCPStore
# where ranks did not all join the group, and NCCL's watchdog (its text as torch
# logs it; under Ray Train's TORCH_NCCL_ASYNC_ERROR_HANDLING=1 it ends the
# process, and the run sees a dead worker, which this does not name).
COLLECTIVE_TIMED_OUT = re.compile(
    r"Timed out waiting \d+ms for (recv|send) operation|Connect timeout |"
    r"did not reach the allreduce in \d+ s|"
    r"Timed out after \d+ seconds waiting for clients|The client socket has timed out after|"
    r"TCP client failed to connect/validate to host .* - timed out|"
    r"Watchdog caught collective operation timeout")
COLLECTIVE_TIMEOUT_ADVICE = (
    "a rank waited --collective-timeout seconds for the others: one of them stopped or "
    "stalled (its own error, if it raised one, is beside this), or the network between the "
    "nodes does not carry the collectives: NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names the "
    "interface, set where the run or sweep starts (under ray job submit, in its "
    "--runtime-env-json)")
# What NCCL says (its WARN, which torch's DistBackendError ends with as "Last
# error:") where it could not make its shared memory: a container's /dev/shm is
# 64 MB unless given more (NCCL's shmutils.cc and older net/shm transports);
# and where it could not reach a peer (bootstrap and sockets, misc/socket.cc) or
# a peer went away. From NCCL's source: no GPU here has run them through Ray.
NCCL_SHARED_MEMORY = re.compile(r"failed to extend /dev/shm/\S+ to \d+ bytes|"
                                r"could not create shared memory in /dev/shm|"
                                r"Error while creating shared memory segment /dev/shm/")
NCCL_SHARED_MEMORY_ADVICE = (
    "NCCL could not make its shared memory in /dev/shm: a container's holds 64 MB unless "
    "given more (a KubeRay pod: an emptyDir of medium Memory mounted at /dev/shm; docker: "
    "--shm-size); NCCL_SHM_DISABLE=1, set where the run or sweep starts, sends the GPUs' "
    "traffic another way, slower")
# "socketStartConnect: Connect to A failed" (NCCL 2.2x), "socketPollConnect: Connect to A
# returned 113" (2.18); NCCL 2.30's (the one torch 2.14 loads, its library's strings):
# "ncclOsSocketStartConnect: connect to A failed", "...: connect to A returned E, exceeded
# error retry count", "ncclOsSocketPollConnect to A failed with error E".
NCCL_CONNECT_FAILED = re.compile(r"no socket interface found|"
                                 r"socket(start|poll)connect:? (connect )?to \S+ (failed|returned)",
                                 re.IGNORECASE)
NCCL_UNREACHABLE = re.compile(f"{NCCL_CONNECT_FAILED.pattern}|ncclRemoteError", re.IGNORECASE)
NCCL_UNREACHABLE_ADVICE = (
    "NCCL could not connect the ranks: a rank that stopped first says so beside this, or "
    "NCCL_SOCKET_IFNAME must name the interface the nodes reach each other by (NCCL_DEBUG=INFO "
    "prints the one NCCL chose), set where the run or sweep starts (under ray job submit, in "
    "its --runtime-env-json)")
LINE_CHARS = 300
TEXT_CHARS = 1000  # several ranks' distinct lines together
# Where a run's memory ran out decides what would need less.
RUN, TRIAL, EQUIVALENCE, CALIBRATION = "run", "trial", "equivalence", "calibration"


def failure_text(error: BaseException | str, where: str = RUN,
                 batch_size_per_worker: int | None = None, precision: str | None = None) -> str:
    """`ranks 0, 1: OutOfMemoryError: CUDA out of memory. ... (a GPU ran out of
    memory: ...)`: each distinct error once with the ranks that raised it; an
    error without worker failures (the controller's, a trial's as Tune keeps it)
    as its own. Out of memory adds what needs less for `where` (RUN, TRIAL,
    EQUIVALENCE or CALIBRATION), given the workers' training batch and precision
    if known; a collective that timed out, or NCCL that could not start, what to
    look at. Errors that differ only in numbers are one (the lowest rank's text
    shown): the same failure on each GPU, or a shape that differs by rank."""
    assert where in (RUN, TRIAL, EQUIVALENCE, CALIBRATION), where
    failures = _failures(error)
    lines, ranks_by_key = {}, {}
    for rank, failure in sorted(failures.items()):
        line = error_line(failure)  # whole: a cut would fall apart where numbers differ
        key = re.sub(r"\d+(\.\d+)?", "N", line)
        lines.setdefault(key, _cut(line, LINE_CHARS))
        ranks_by_key.setdefault(key, []).append(rank)
    if ranks_by_key:
        text = _cut("; ".join(
            f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}: "
            f"{lines[key]}" for key, ranks in ranks_by_key.items()), TEXT_CHARS)
    else:
        text = _cut(error_line(error), LINE_CHARS)
    kind = _kind(_full_text(error))
    if kind in ("GPU", "node"):
        text += f" ({memory_advice(kind, where, batch_size_per_worker, precision)})"
    elif kind is not None:
        text += f" ({kind})"
    return text


def _kind(full: str) -> str | None:
    """What ran out or could not connect, by the texts above: "GPU" or "node" for
    memory (first: a rank out of memory fails its peers' collectives in passing),
    else the advice on the collectives; None for anything else."""
    if any(marker in full for marker in CUDA_OUT_OF_MEMORY):
        return "GPU"
    if any(marker in full for marker in HOST_OUT_OF_MEMORY):
        return "node"
    for pattern, advice in ((COLLECTIVE_TIMED_OUT, COLLECTIVE_TIMEOUT_ADVICE),
                            (NCCL_SHARED_MEMORY, NCCL_SHARED_MEMORY_ADVICE),
                            (NCCL_UNREACHABLE, NCCL_UNREACHABLE_ADVICE)):
        if pattern.search(full):
            return advice
    return None


def collectives_failed(error: BaseException | str) -> bool:
    """Whether the workers could not sum: a collective timed out, or NCCL could not
    start. Not where memory ran out, nor where a worker died (Ray Train's failed or
    timed-out health check: the kernel's OOM killer, a lost node), whose peers'
    collectives fail in passing; nor NCCL's ncclRemoteError, its words for a peer
    that went away."""
    if any(type(failure).__name__.startswith("WorkerHealthCheck")
           for failure in _failures(error).values()):
        return False
    full = _full_text(error)
    kind = _kind(full)
    return kind in (COLLECTIVE_TIMEOUT_ADVICE, NCCL_SHARED_MEMORY_ADVICE) or (
        kind == NCCL_UNREACHABLE_ADVICE and NCCL_CONNECT_FAILED.search(full) is not None)


def _failures(error: BaseException | str) -> dict:
    """Each failed rank's exception, by rank (Ray Train's `worker_failures`); none
    for an error without them."""
    return getattr(error, "worker_failures", None) or {}


def _full_text(error: BaseException | str) -> str:
    """The error's text and each failed rank's."""
    return " ".join([_text(error), *map(_text, _failures(error).values())])


def error_line(error: BaseException | str) -> str:
    """The error's line that says what went wrong: the one that says memory ran
    out, if one does, else its last; after the error's name unless it is a
    traceback's last line (which names it) or a bare string."""
    text = _text(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    marked = [line for line in lines
              if any(marker in line for marker in CUDA_OUT_OF_MEMORY + HOST_OUT_OF_MEMORY)]
    line = marked[0] if marked else (lines[-1] if lines else "")
    if not isinstance(error, str) and "Traceback (most recent call last)" not in text:
        line = f"{type(error).__name__}: {line}" if line else type(error).__name__
    return line


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."


def memory_advice(device: str, where: str, batch_size_per_worker: int | None,
                  precision: str | None = None) -> str:
    """What needs less memory, by where it ran out: a GPU holds one worker, so
    fewer images per worker help, and more workers at the same global batch; a
    node's memory holds every worker and trial on it, so more workers do not."""
    ran_out = f"a {device} ran out of memory"
    if where == EQUIVALENCE:
        return (f"{ran_out}: the check runs the whole global batch on one device; a smaller "
                f"--batch-size needs less")
    if where == CALIBRATION:
        return f"{ran_out} in the calibration's probes: --no-calibrate skips them"
    each = (f", training {counted(batch_size_per_worker, 'image')} a step per worker"
            if batch_size_per_worker else "")
    return f"{ran_out}{each}: " + less_memory_ways(
        device, precision, where == TRIAL, accumulate=batch_size_per_worker != 1)


# The way out that keeps the optimizer: the same step's activations a part at a time.
ACCUMULATE = "so does --accumulation-steps N, the same step in N micro-batches"


def less_memory_ways(device: str, precision: str | None, trials: bool = False,
                     shared_gpus: bool = False, *, accumulate: bool) -> str:
    """What needs less memory where a GPU's (`device` "GPU") or a node's ran out;
    `trials`: fewer trials at a time too (a sweep's trials share a node's);
    `shared_gpus`: workers share GPUs (more of them would crowd each GPU more);
    `accumulate`: more micro-batches would do (a worker's step held more than one
    image at once)."""
    accumulating = f"; {ACCUMULATE}" if accumulate else ""
    if device == "GPU":
        fewer = ("fewer images on a GPU (a smaller --batch-size, or a larger "
                 "--gpus-per-worker: fewer workers to a GPU)" if shared_gpus else
                 "fewer images per worker (a smaller --batch-size, or more --workers with "
                 "--batch-scaling global)")
        half = "" if precision in HALF_PRECISIONS else " or --precision bf16"
        return fewer + half + " needs less" + accumulating
    return ("a smaller --batch-size, or fewer workers on a node"
            + (" or fewer trials at a time (--max-concurrent-trials)" if trials else "")
            + ", needs less" + accumulating)


def _text(error: BaseException | str) -> str:
    """The error's text; empty where its own `__str__` fails (a bad unpickle), so
    that `error_line` names it by its type alone."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - any error of a user's exception's __str__
        return ""
