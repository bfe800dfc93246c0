"""CUDA's own out-of-memory error reads as one (orchestrator/driver/failures.py):
the marker is torch's text, so a change of it fails here, not in a user's run.
The CPU allocator's, and through a real sweep: tests/unit/test_failures.py,
tests/cluster/test_own_model_on_ray.py. Skipped without a CUDA GPU."""

import pytest
import torch
from ray.train import WorkerGroupError

from orchestrator.driver.failures import RUN, failure_text


def test_cudas_refusal_is_read_as_out_of_memory():
    with pytest.raises(torch.OutOfMemoryError) as refused:
        torch.empty(1 << 45, dtype=torch.uint8, device="cuda")  # 32 TiB: the usual message
    text = failure_text(WorkerGroupError("", {0: refused.value}), RUN, batch_size_per_worker=256)
    assert text.startswith("rank 0: OutOfMemoryError: CUDA out of memory. Tried to allocate "
                           "32.00 TiB. GPU 0 has a total capacity of "), text
    assert "(a GPU ran out of memory, training 256 images a step per worker: fewer" in text, text
    torch.cuda.empty_cache()
