"""A failed run's error in one line (orchestrator/driver/failures.py): each rank's
error once, and memory run out with the ways out that apply where it ran out.
The failures are built as Ray 2.60 hands them over: the exception a worker
raised, or a failed health check holding a dead worker's cause. Through a real
run, a real allocator's refusal: tests/cluster/test_own_model_on_ray.py;
CUDA's: tests/gpu/test_out_of_memory.py."""

import pytest
import torch
from ray.exceptions import RayTaskError
from ray.train import ControllerError, WorkerGroupError

from orchestrator.driver.commands import failed_trials_text
from orchestrator.driver.failures import (CALIBRATION, EQUIVALENCE, LINE_CHARS, RUN, TEXT_CHARS,
                                          TRIAL, collectives_failed, failure_text)


def _cuda_oom(gpu: int, free_gib: float) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate 20.00 GiB. GPU {gpu} has a total capacity of "
        f"79.19 GiB of which {free_gib:.2f} GiB is free. Including non-PyTorch memory, this "
        f"process has 76.06 GiB memory in use.")


class _HealthCheckFailed(RuntimeError):
    """The shape of Ray Train's failed health check: its message, then its cause's."""

    def __str__(self):
        return ("Worker health check failed.\nThe actor died unexpectedly before finishing "
                "this task.\n\tclass_name: RayTrainWorker\nThe actor is dead because it was "
                "killed by the memory monitor: 1 worker(s) were killed due to the node running "
                "low on memory. Memory on the node was 23.1GB / 24.0GB (0.96).\nRefer to the "
                "documentation on how to address the out of memory issue: https://docs.ray.io")


GPU_ADVICE = ("fewer images per worker (a smaller --batch-size, or more --workers with "
              "--batch-scaling global) or --precision bf16 needs less; so does "
              "--accumulation-steps N, the same step in N micro-batches")


def test_ranks_whose_errors_differ_in_numbers_only_are_named_once_with_the_ways_out():
    """Each GPU's message names its own index and free memory: one line, the first's."""
    error = WorkerGroupError("[Rank 0 Error Snippet]:\n... (Output truncated) ...",
                             {1: _cuda_oom(1, 3.5), 0: _cuda_oom(0, 3.12)})
    assert failure_text(error, RUN, batch_size_per_worker=128) == (
        f"ranks 0, 1: OutOfMemoryError: {_cuda_oom(0, 3.12)} (a GPU ran out of memory, "
        f"training 128 images a step per worker: {GPU_ADVICE})")


def test_different_errors_are_each_named_and_none_gets_memory_advice():
    error = WorkerGroupError("snippets", {0: ValueError("bad shape"), 1: KeyError("conv1")})
    assert failure_text(error, RUN, batch_size_per_worker=64) == (
        "rank 0: ValueError: bad shape; rank 1: KeyError: 'conv1'")


def test_a_worker_the_memory_monitor_killed_names_that_line_and_the_nodes_ways_out():
    error = WorkerGroupError("snippets", {2: _HealthCheckFailed()})
    text = failure_text(error, TRIAL, batch_size_per_worker=32)
    assert text.startswith("rank 2: _HealthCheckFailed: The actor is dead because it was killed "
                           "by the memory monitor: 1 worker(s) were killed due to the node "
                           "running low on memory."), text
    assert text.endswith(
        "(a node ran out of memory, training 32 images a step per worker: a smaller "
        "--batch-size, or fewer workers on a node or fewer trials at a time "
        "(--max-concurrent-trials), needs less; so does --accumulation-steps N, the same "
        "step in N micro-batches)"), text
    assert "--max-concurrent-trials" not in failure_text(error, RUN)


def test_where_memory_ran_out_decides_the_advice():
    error = WorkerGroupError("snippets", {0: _cuda_oom(0, 1.0)})
    assert failure_text(error, EQUIVALENCE).endswith(
        "(a GPU ran out of memory: the check runs the whole global batch on one device; a "
        "smaller --batch-size needs less)")
    assert failure_text(error, CALIBRATION).endswith(
        "(a GPU ran out of memory in the calibration's probes: --no-calibrate skips them)")
    assert failure_text(error, RUN).endswith(f"(a GPU ran out of memory: {GPU_ADVICE})")
    assert failure_text(error, RUN, precision="bf16").endswith(
        "(a GPU ran out of memory: fewer images per worker (a smaller --batch-size, or more "
        "--workers with --batch-scaling global) needs less; so does --accumulation-steps N, "
        "the same step in N micro-batches)")  # bf16 already
    with pytest.raises(AssertionError):
        failure_text(error, "elsewhere")


def test_long_messages_that_differ_in_the_width_of_their_numbers_are_still_one():
    """Real CUDA messages run over the line's 300 characters; each GPU's numbers
    differ in width, so a cut before comparing would tell them apart."""
    def oom(free: str) -> torch.OutOfMemoryError:
        return torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
            f"79.19 GiB of which {free} GiB is free. Including non-PyTorch memory, this process "
            f"has 76.06 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by "
            f"PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated. If reserved but "
            f"unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
            f":True to avoid fragmentation.")
    text = failure_text(WorkerGroupError("", {0: oom("3.12"), 1: oom("13.50")}), RUN)
    assert text.startswith("ranks 0, 1: OutOfMemoryError: CUDA out of memory.") and (
        "3.12 GiB is free" in text and "13.50" not in text), text


def test_the_line_that_says_memory_ran_out_is_chosen_else_the_last():
    """CUDA's asynchronous error puts its advice after the line that matters."""
    cuda_error = RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be "
                              "asynchronously reported at some other API call.\n")
    text = failure_text(WorkerGroupError("", {0: cuda_error}), RUN)
    assert text.startswith("rank 0: RuntimeError: CUDA error: out of memory (a GPU ran out"), text
    two = RuntimeError("DefaultCPUAllocator: can't allocate memory: 8 bytes\nthen "
                       "can't allocate memory: 16 bytes")
    assert failure_text(two).startswith("RuntimeError: DefaultCPUAllocator: can't allocate "
                                        "memory: 8 bytes (a node ran out of memory")
    plain = ValueError("while building the model\nconv1 expects 3 channels, got 1")
    assert failure_text(plain) == "ValueError: conv1 expects 3 channels, got 1"


def test_the_error_tune_hands_back_still_names_its_ranks():
    """Tune returns the trial's error wrapped in a RayTaskError that is also an
    instance of it; its attributes are the wrapped error's."""
    cause = WorkerGroupError("snippets", {0: _cuda_oom(0, 1.0)})
    wrapped = RayTaskError("train", "Traceback (most recent call last):\n  ...\nsnippets",
                           cause).as_instanceof_cause()
    assert isinstance(wrapped, WorkerGroupError)
    assert failure_text(wrapped, TRIAL).startswith("rank 0: OutOfMemoryError: CUDA out of")


def test_errors_without_workers_and_bad_texts_are_still_one_line():
    assert failure_text(ControllerError(ValueError("no such placement group"))) == (
        "ControllerError: no such placement group")
    assert failure_text(RuntimeError("")) == "RuntimeError"
    assert failure_text("a trial's error.txt, as Tune reads it back") == (
        "a trial's error.txt, as Tune reads it back")
    long = failure_text(WorkerGroupError("x" * 1000, {}))
    assert len(long) == LINE_CHARS and long.endswith("...")
    assert long.startswith("WorkerGroupError: xxx")

    class Unprintable(Exception):
        def __str__(self):
            raise AttributeError("lost in unpickling")

    assert failure_text(WorkerGroupError("", {0: Unprintable()})) == "rank 0: Unprintable"
    many = WorkerGroupError("", {rank: ValueError("y" * rank + "x" * 400) for rank in range(64)})
    text = failure_text(many)
    assert len(text) == TEXT_CHARS and text.endswith("...") and text.count("; rank") == 3


def test_the_cpu_allocators_own_refusal_is_read_as_out_of_memory():
    """The marker is torch's text, so a change of it fails here, not in a user's run."""
    with pytest.raises(RuntimeError) as refused:
        torch.empty(1 << 62, dtype=torch.uint8)
    text = failure_text(WorkerGroupError("", {0: refused.value}), RUN, batch_size_per_worker=1)
    assert "can't allocate memory" in text and text.endswith(
        "(a node ran out of memory, training 1 image a step per worker: a smaller --batch-size, "
        "or fewer workers on a node, needs less)"), text


def test_failed_trials_are_one_line_each_error_after_its_trials():
    assert failed_trials_text({"t_00000": "E"}) == "1 trial failed: t_00000: E"
    assert failed_trials_text({"a": "E1", "b": "E1", "c": "E2"}) == (
        "3 trials failed:\n  a, b: E1\n  c: E2")
    lines = failed_trials_text({str(index): f"E{index}" for index in range(8)}).splitlines()
    assert lines[0] == "8 trials failed:" and lines[1:6] == [f"  {i}: E{i}" for i in range(5)]
    assert lines[6:] == ["  and 3 other errors: the error column of trials.csv"]


@pytest.mark.parametrize("message", [
    # NCCL's watchdog (ProcessGroupNCCL.cpp), as torch 2.x logs it
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
    "OpType=ALLREDUCE, NumelIn=11689512, NumelOut=11689512, Timeout(ms)=600000) ran for "
    "600081 milliseconds before timing out.",
    # torch's TCPStore, where not every rank joined the process group in time
    "Timed out after 1801 seconds waiting for clients. 1/2 clients joined.",
    "TCP client failed to connect/validate to host 10.0.0.2:29500 - timed out (try=3, "
    "timeout=1800000ms): The client socket has timed out after 1800000ms while trying to "
    "connect to (10.0.0.2, 29500).",
    # the shared-memory allreduce of CPU workers on one node (sync/shm_allreduce.py)
    "worker 1 did not reach the allreduce in 1800 s (the process group's timeout); worker 0 "
    "stops waiting for it",
])
def test_a_collective_timeout_says_what_to_look_at(message):
    """gloo's own timeout, through a real Ray Train run:
    tests/cluster/test_collective_timeout.py."""
    text = failure_text(WorkerGroupError("Training failed", {0: RuntimeError(message)}), TRIAL)
    assert text.startswith("rank 0: RuntimeError: ") and text.endswith(
        "(a rank waited --collective-timeout seconds for the others: one of them stopped or "
        "stalled (its own error, if it raised one, is beside this), or the network between "
        "the nodes does not carry the collectives: NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME "
        "names the interface, set where the run or sweep starts (under ray job submit, in its "
        "--runtime-env-json))"), text
    assert "(a rank waited" not in failure_text(RuntimeError("Timed out waiting for a lock"))


# torch's DistBackendError where NCCL failed, ending with NCCL's last WARN.
NCCL_ERROR = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
              "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
              "2.21.5\nncclSystemError: System call (e.g. socket, malloc) or external library "
              "call failed or device error. \nLast error:\n")


@pytest.mark.parametrize("last_error, advice", [
    # NCCL's shmutils.cc in a container of the default 64 MB /dev/shm
    ("Error: failed to extend /dev/shm/nccl-vzIpS6 to 9637892 bytes, error: No space left on "
     "device (28)", "NCCL could not make its shared memory in /dev/shm: a container's holds "
                    "64 MB unless given more (a KubeRay pod: an emptyDir of medium Memory"),
    # NCCL's misc/socket.cc: a peer's address that this node cannot reach
    ("socketStartConnect: Connect to 10.0.0.2<43527> failed : Software caused connection abort",
     "NCCL could not connect the ranks: a rank that stopped first says so beside this, or "
     "NCCL_SOCKET_IFNAME must name the interface the nodes reach each other by"),
    ("Bootstrap : no socket interface found", "NCCL_SOCKET_IFNAME must name the interface"),
    # NCCL 2.30's texts (the one torch 2.14 loads: its library's format strings)
    ("ncclOsSocketStartConnect: connect to 10.0.0.2<43527> failed : Connection timed out",
     "NCCL_SOCKET_IFNAME must name the interface"),
    ("ncclOsSocketPollConnect: connect to 10.0.0.2<43527> returned No route to host, exceeded "
     "error retry count after 35 attempts", "NCCL_SOCKET_IFNAME must name the interface"),
    ("ncclOsSocketPollConnect to 10.0.0.2<43527> failed with error No route to host",
     "NCCL_SOCKET_IFNAME must name the interface"),
])
def test_nccl_that_could_not_start_says_what_to_look_at(last_error, advice):
    from torch.distributed import DistBackendError
    error = DistBackendError(NCCL_ERROR + last_error)
    text = failure_text(WorkerGroupError("Training failed", {0: error, 1: error}), TRIAL)
    # The line shown is NCCL's own, the advice after it.
    assert text.startswith(f"ranks 0, 1: DistBackendError: {last_error[:40]}"), text
    assert advice in text and text.endswith(")"), text
    assert "NCCL could not" not in failure_text(RuntimeError("Connect to the store failed"))


def test_workers_that_could_not_sum_are_told_from_other_failures():
    """calibrate.py stops a sweep before its trials on these alone."""
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed "
                        "out waiting 3000ms for recv operation to complete")
    from torch.distributed import DistBackendError
    assert collectives_failed(WorkerGroupError("Training failed", {0: gloo}))
    assert collectives_failed(DistBackendError(NCCL_ERROR + "Bootstrap : no socket interface "
                                                            "found"))
    # A rank out of memory fails its peers' collectives in passing: memory, not the network.
    out_of_memory = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not collectives_failed(WorkerGroupError("Training failed",
                                                   {0: out_of_memory, 1: gloo}))
    assert not collectives_failed(WorkerGroupError("Training failed",
                                                   {0: ValueError("loss is nan")}))
    # A peer that went away: NCCL's ncclRemoteError; a worker that died (the kernel's OOM
    # killer, a lost node), as Ray Train's failed health check says, beside the others'.
    remote = DistBackendError(NCCL_ERROR.replace("ncclSystemError", "ncclRemoteError")
                              + "Connection closed by remote peer")
    assert not collectives_failed(WorkerGroupError("Training failed", {0: remote}))
    assert "NCCL could not connect the ranks" in failure_text(remote)  # advice still given
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError
    died = WorkerHealthCheckFailedError("A worker health check failed.",
                                        RuntimeError("The actor died unexpectedly"))
    assert not collectives_failed(WorkerGroupError("Training failed", {0: gloo, 1: died}))
