"""One trial on real Ray with the fast path (orchestrator.ray_fastpath): which
helper actors a fit starts beside its workers, and where its controller runs.
The stock path is tested in test_ray_fastpath_on_ray.py."""

import ray

from orchestrator.config.options import TrainConfig
from orchestrator.driver.trial import run_trial
from helpers import num_actors


CONFIG = TrainConfig(global_batch_size=128, num_epochs=1, train_limit=256, test_limit=100)


@ray.remote(num_cpus=0)
class _TrialDriver:
    """An actor that fits a trial, as a Tune trial does."""

    def fit(self, data_refs: list[ray.ObjectRef], storage_path: str) -> list[int]:
        result = run_trial(CONFIG, data_refs[0], name="in-actor", storage_path=storage_path,
                           max_failures=0)
        return [row["epoch"] for row in result.return_value]


def test_a_fit_keeps_the_placement_group_cleaner_and_starts_no_dataset_manager(
        ray_session, fashion_mnist_small, tmp_path):
    cleaners_before = num_actors("PlacementGroupCleaner")
    controllers_before = num_actors("TrainController")
    result = run_trial(CONFIG, ray.put(fashion_mnist_small), name="helpers",
                       storage_path=str(tmp_path), max_failures=0)
    assert [row["epoch"] for row in result.return_value] == [1]
    # No run passes Ray Data datasets, so the actor that serves them is never started.
    assert num_actors("DatasetManager") == 0
    # The cleaner still guards the run's placement group; it was stopped
    # without the fit waiting for it, and exits on its own.
    assert num_actors("PlacementGroupCleaner") == cleaners_before + 1
    # The embedded cluster has no autoscaler to ask for the workers.
    assert num_actors("_AutoscalingCoordinatorActor") == 0
    # A plain driver keeps Ray Train's controller actor.
    assert num_actors("TrainController") == controllers_before + 1


def test_a_fit_inside_an_actor_runs_its_controller_there(ray_session, fashion_mnist_small,
                                                         tmp_path):
    controllers_before = num_actors("TrainController")
    cleaners_before = num_actors("PlacementGroupCleaner")
    driver = _TrialDriver.remote()
    assert ray.get(driver.fit.remote([ray.put(fashion_mnist_small)], str(tmp_path))) == [1]
    assert num_actors("TrainController") == controllers_before
    # The cleaner now watches the actor that holds the controller.
    assert num_actors("PlacementGroupCleaner") == cleaners_before + 1
    ray.kill(driver)
