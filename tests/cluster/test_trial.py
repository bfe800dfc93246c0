"""One trial on real Ray with the fast path (orchestrator.ray_fastpath): which
helper actors a fit starts beside its workers, and where its controller runs.
The stock path is tested in test_ray_fastpath_on_ray.py."""

import dataclasses
import signal
import threading
import time

import pytest
import ray
from ray.util.state import list_actors

from orchestrator.config.options import TrainConfig
from orchestrator.driver.trial import run_trial
from helpers import hang_limit, num_actors, num_live_placement_groups


CONFIG = TrainConfig(global_batch_size=128, num_epochs=1, train_limit=256, test_limit=100)


@ray.remote(num_cpus=0)
class _TrialDriver:
    """An actor that fits a trial, as a Tune trial does."""

    def fit(self, data_refs: list[ray.ObjectRef], storage_path: str,
            num_epochs: int = CONFIG.num_epochs) -> list[int]:
        config = dataclasses.replace(CONFIG, num_epochs=num_epochs)
        result = run_trial(config, data_refs[0], name="in-actor", storage_path=storage_path,
                           max_failures=0)
        return [row["epoch"] for row in result.return_value]


def test_a_fit_keeps_the_placement_group_cleaner_and_starts_no_dataset_manager(
        ray_session, fashion_mnist_small, tmp_path):
    cleaners_before = num_actors("PlacementGroupCleaner")
    controllers_before = num_actors("TrainController")
    previous = signal.signal(signal.SIGINT, _ours)
    seen, fitted = set(), threading.Event()
    watcher = threading.Thread(target=_watch_sigint_handlers, args=(seen, fitted))
    watcher.start()
    try:
        result = run_trial(CONFIG, ray.put(fashion_mnist_small), name="helpers",
                           storage_path=str(tmp_path), max_failures=0)
    finally:
        fitted.set()
        watcher.join()
        after = signal.signal(signal.SIGINT, previous)
    assert [row["epoch"] for row in result.return_value] == [1]
    # Ray Train's fit, in a main thread, installs its own SIGINT handler (a Ctrl-C
    # aborts the run); the fit puts ours back (interrupts.py), not to swallow a
    # Ctrl-C after it.
    assert any("sigint_handler" in getattr(handler, "__qualname__", "") for handler in seen)
    assert after is _ours
    # No run passes Ray Data datasets, so the actor that serves them is never started.
    assert num_actors("DatasetManager") == 0
    # The cleaner still guards the run's placement group; it was stopped
    # without the fit waiting for it, and exits on its own.
    assert num_actors("PlacementGroupCleaner") == cleaners_before + 1
    # The embedded cluster has no autoscaler to ask for the workers.
    assert num_actors("_AutoscalingCoordinatorActor") == 0
    # A plain driver keeps Ray Train's controller actor.
    assert num_actors("TrainController") == controllers_before + 1


def _ours(signum, frame):
    raise KeyboardInterrupt


def _watch_sigint_handlers(seen: set, done: threading.Event) -> None:
    while not done.wait(0.05):
        seen.add(signal.getsignal(signal.SIGINT))


def test_a_fit_inside_an_actor_runs_its_controller_there(ray_session, fashion_mnist_small,
                                                         tmp_path):
    controllers_before = num_actors("TrainController")
    cleaners_before = num_actors("PlacementGroupCleaner")
    live_cleaners_before = _live_actors("PlacementGroupCleaner")
    live_groups_before = num_live_placement_groups()
    driver = _TrialDriver.remote()
    data_refs = [ray.put(fashion_mnist_small)]
    for _ in range(2):  # as Tune runs trial after trial in one process
        assert ray.get(driver.fit.remote(data_refs, str(tmp_path))) == [1]
    assert num_actors("TrainController") == controllers_before
    # One cleaner watches the actor that holds the controller, for all its fits.
    assert num_actors("PlacementGroupCleaner") == cleaners_before + 1
    cleaner = _live_actors("PlacementGroupCleaner") - live_cleaners_before
    assert len(cleaner) == 1
    # The process dies during a fit: the cleaner frees that fit's placement
    # group (Ray ties it to the job, not to the actor that made it), then exits.
    # Killed once an epoch is checkpointed: its group is registered by then,
    # when its workers have started.
    third = tmp_path / "third"
    running = driver.fit.remote(data_refs, str(third), num_epochs=500)
    _wait_for(lambda: any(third.rglob("checkpoint_*")), "the third fit's first epoch")
    assert num_live_placement_groups() > live_groups_before
    ray.kill(driver)
    _wait_for(lambda: num_live_placement_groups() == live_groups_before
              and ray.available_resources().get("CPU") == 2.0, "the dead process's group freed")
    _wait_for(lambda: not cleaner & _live_actors("PlacementGroupCleaner"), "the cleaner's exit")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(running)


def _live_actors(class_name: str) -> set[str]:
    return {actor.actor_id for actor in list_actors(limit=10_000, raise_on_missing_output=False)
            if actor.class_name.endswith(class_name) and actor.state != "DEAD"}


def _wait_for(condition, what: str, limit_s: float = 30) -> None:
    """Poll until `condition()`; the cleaner checks its process every 5 s."""
    limit_s = hang_limit(limit_s)
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {limit_s:.0f} s for {what}"
        time.sleep(0.5)
