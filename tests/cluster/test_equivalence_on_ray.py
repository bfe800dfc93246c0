"""The book's claim through Ray Train: two Ray workers and one device are the
same optimizer, read back from Ray Train's checkpoint, summed through shared
memory or gloo (tests/processes/test_equivalence.py checks it on plain gloo
processes for every strategy, k = 2 and 3)."""

from pathlib import Path

import pytest
import ray

from helpers import EXACT_STRATEGIES, assert_same_parameters, equivalence_config, run_here
from orchestrator.training.checkpoint import load_checkpoint
from orchestrator.training.models import build_model
from orchestrator.training.sync.shm_allreduce import stores_in_program_order
from orchestrator.driver.trial import run_trial


@pytest.mark.parametrize("sync, global_batch_size, precision, shared_memory", [
    # uneven: shards of 128 and 127
    *[(sync, 255, "fp64", True) for sync in EXACT_STRATEGIES],
    ("bucketed", 255, "fp64", False),  # summed by gloo rather than through shared memory
    ("scratch", 256, "fp64", True),
    ("bucketed", 256, "fp32", True),
])
def test_two_ray_workers_match_one_device(ray_session, fashion_mnist_small, tmp_path,
                                          sync, global_batch_size, precision, shared_memory):
    case = (sync, "lenet", global_batch_size, precision, "nchw")
    _, reference = run_here(equivalence_config(case), fashion_mnist_small)
    config = equivalence_config(case, num_workers=2, shared_memory=shared_memory)
    result = run_trial(config, ray.put(fashion_mnist_small),
                       name=f"equiv-{sync}-{global_batch_size}-{precision}-{shared_memory}",
                       storage_path=str(tmp_path), max_failures=0)
    assert [row["epoch"] for row in result.return_value] == [1, 2]
    through_memory = (shared_memory and sync in ("scratch", "bucketed")
                      and stores_in_program_order())
    group = "gloo root" if sync == "root" else "gloo"  # the book's allreduce: sends, receives
    assert result.return_value[-1]["transport"] == ("shared memory" if through_memory else group)
    with result.checkpoint.as_directory() as folder:
        state, _, _ = load_checkpoint(Path(folder))
    assert_same_parameters(state["model"], reference["model"],
                           build_model("lenet", seed=config.seed).state_dict(), precision)
