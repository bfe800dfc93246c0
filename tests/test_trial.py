"""One trial on real Ray: which helper actors a fit starts beside its workers."""

import ray
from ray.util.state import list_actors

from orchestrator.config import TrainConfig
from orchestrator.trial import run_trial


def _actor_states(class_name: str) -> list[str]:
    return [actor.state for actor in
            list_actors(filters=[("class_name", "=", class_name)], raise_on_missing_output=False)]


def test_a_fit_keeps_the_placement_group_cleaner_and_starts_no_dataset_manager(
        ray_session, fashion_mnist_small, tmp_path):
    cleaners_before = len(_actor_states("PlacementGroupCleaner"))
    config = TrainConfig(global_batch_size=128, num_epochs=1, train_limit=256, test_limit=100)
    result = run_trial(config, ray.put(fashion_mnist_small), name="helpers",
                       storage_path=str(tmp_path), max_failures=0)
    assert [row["epoch"] for row in result.return_value] == [1]
    # No run passes Ray Data datasets, so the actor that serves them is never started.
    assert _actor_states("DatasetManager") == []
    # The cleaner still guards the run's placement group; it was stopped
    # without the fit waiting for it, and exits on its own.
    assert len(_actor_states("PlacementGroupCleaner")) == cleaners_before + 1
