"""A failed run's error in one line (orchestrator/driver/failures.py): each rank's
last traceback line once, and a worker out of memory with the ways out. Through
a real run, a real allocator's refusal: tests/cluster/test_own_model_on_ray.py;
CUDA's: tests/gpu/test_out_of_memory.py."""

import pytest
import torch
from ray.exceptions import RayTaskError
from ray.train import ControllerError, WorkerGroupError

from orchestrator.driver.failures import LINE_CHARS, failure_text


def _traceback(last: str) -> Exception:
    """What Ray Train keeps of a rank's error: its traceback's text."""
    return RuntimeError('Traceback (most recent call last):\n  File "loop.py", line 9, in step\n'
                        f"    logits = model(x)\n{last}\n")


CUDA_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has "
            "a total capacity of 79.19 GiB of which 3.12 GiB is free.")


def test_ranks_that_share_an_error_are_named_once_with_the_ways_out():
    error = WorkerGroupError("[Rank 0 Error Snippet]:\n... (Output truncated) ...",
                             {1: _traceback(CUDA_OOM), 0: _traceback(CUDA_OOM)})
    assert failure_text(error, batch_size_per_worker=128) == (
        f"ranks 0, 1: {CUDA_OOM} (a worker ran out of memory at 128 images a step per worker: "
        f"fewer images per worker (a smaller --batch-size, or more --workers with "
        f"--batch-scaling global) or --precision bf16 needs less)")


def test_different_errors_are_each_named_and_no_memory_hint_without_cause():
    error = WorkerGroupError("snippets", {0: _traceback("ValueError: bad shape"),
                                          1: _traceback("ray.exceptions.ActorDiedError: died")})
    assert failure_text(error, batch_size_per_worker=64) == (
        "rank 0: ValueError: bad shape; rank 1: ray.exceptions.ActorDiedError: died")


def test_the_error_tune_hands_back_still_names_its_ranks():
    """Tune returns the trial's error wrapped in a RayTaskError that is also an
    instance of it; its attributes are the wrapped error's."""
    cause = WorkerGroupError("snippets", {0: _traceback(CUDA_OOM)})
    wrapped = RayTaskError("train", "Traceback (most recent call last):\n  ...\nsnippets",
                           cause).as_instanceof_cause()
    assert isinstance(wrapped, WorkerGroupError)
    assert failure_text(wrapped).startswith(f"rank 0: {CUDA_OOM} (a worker ran out of memory: ")


def test_an_error_without_workers_is_its_own_last_line_and_name_cut_to_one_line():
    assert failure_text(ControllerError(ValueError("no such placement group"))) == (
        "ControllerError: no such placement group")
    assert failure_text(RuntimeError("")) == "RuntimeError"
    long = failure_text(WorkerGroupError("x" * 1000, {}))
    assert len(long) == LINE_CHARS and long.endswith("...")
    assert long.startswith("WorkerGroupError: xxx")


def test_the_cpu_allocators_own_refusal_is_read_as_out_of_memory():
    """The marker is torch's text, so a change of it fails here, not in a user's run."""
    with pytest.raises(RuntimeError) as refused:
        torch.empty(1 << 62, dtype=torch.uint8)
    text = failure_text(WorkerGroupError("", {0: refused.value}), batch_size_per_worker=1)
    assert "a worker ran out of memory at 1 image a step per worker" in text, text
