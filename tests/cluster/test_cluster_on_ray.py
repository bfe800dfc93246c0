"""The embedded cluster's processes find their own State API, not the one the
last `ray start` on this machine recorded."""

import tempfile
import time
from pathlib import Path

import ray
from ray.train.v2._internal.state.util import is_actor_alive


@ray.remote(num_cpus=0)
class _Probe:
    def actor_id(self) -> str:
        return ray.get_runtime_context().get_actor_id()

    def is_alive(self, actor_id: str) -> tuple[bool, float]:
        started = time.monotonic()
        return is_actor_alive(actor_id=actor_id, timeout=10), time.monotonic() - started


def test_workers_ask_this_clusters_state_api_not_the_last_ray_start(ray_session):
    # The question Ray Train's placement-group cleaner asks every second. A
    # leftover record of another cluster must neither slow nor falsify it.
    current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    saved = current.read_text() if current.is_file() else None
    current.parent.mkdir(exist_ok=True)
    current.write_text("127.0.0.1:9")  # a cluster that is gone
    try:
        asker, target = _Probe.remote(), _Probe.remote()
        alive, elapsed_s = ray.get(asker.is_alive.remote(ray.get(target.actor_id.remote())))
    finally:
        if saved is None:
            current.unlink()
        else:
            current.write_text(saved)
    assert alive
    assert elapsed_s < 5
