"""The embedded cluster's settings, without starting it: its dashboard gets a
port clear of those Ray's own processes bind, and the dashboard's line says
how to get the token. (tests/cluster/test_cluster_on_ray.py: its processes
find their own State API.)"""

import socket

import pytest

from orchestrator.driver.cluster import Cluster, free_local_port


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
