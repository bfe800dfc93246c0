"""The embedded cluster: its processes find their own State API, its
dashboard gets a port clear of those Ray's own processes bind, and the
dashboard's line says how to get the token."""

import socket
import tempfile
import time
from pathlib import Path

import pytest
import ray
from ray.train.v2._internal.state.util import is_actor_alive

from orchestrator.driver.cluster import Cluster, free_local_port


@ray.remote(num_cpus=0)
class _Probe:
    def actor_id(self) -> str:
        return ray.get_runtime_context().get_actor_id()

    def is_alive(self, actor_id: str) -> tuple[bool, float]:
        started = time.monotonic()
        return is_actor_alive(actor_id=actor_id, timeout=10), time.monotonic() - started


@pytest.mark.cluster
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


def test_a_taken_preferred_port_gives_the_next_one_not_a_kernel_picked_one():
    # Kernel-picked ports are where Ray's own processes bind theirs (see
    # free_local_port); a dashboard must not be sent there.
    with socket.socket() as holder:
        holder.bind(("", 0))
        taken = holder.getsockname()[1]
        if taken >= 65535 - 100:
            pytest.skip("the kernel picked a port too close to the top")
        chosen = free_local_port(preferred=taken)
    assert taken < chosen < taken + 100


@pytest.mark.parametrize("token_auth, line", [
    (True, "Ray dashboard: http://127.0.0.1:8265 (token: run `ray get-auth-token`)"),
    (False, "Ray dashboard: http://127.0.0.1:8265"),
])
def test_the_dashboard_line_says_how_to_get_the_token(token_auth, line):
    cluster = Cluster(address=None, dashboard_url="http://127.0.0.1:8265", node_resources=(),
                      token_auth=token_auth)
    assert cluster.dashboard_hint == line
