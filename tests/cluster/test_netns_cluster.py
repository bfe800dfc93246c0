"""A multi-node cluster made on this machine (tools/netns_cluster.py): each
node its own address, link rate and view of the files, and nothing left once
it is torn down. (A sweep spread over its nodes and recorded by node:
tests/cluster/test_placement_on_netns.py.)"""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray.experimental import internal_kv

from helpers import hang_limit, import_tool

netns_cluster = import_tool("netns_cluster")

# 4 MB at 20 Mbit/s (2.5 MB/s) take 1.6 s; the same bytes between namespaces
# without tbf take milliseconds.
RATE = "20mbit"
RATE_BYTES_PER_S = 20e6 / 8
PAYLOAD_BYTES = 4_000_000
RECEIVER_PORT = 5001

needs_namespaces = pytest.mark.skipif(
    not netns_cluster.namespaces_available(),
    reason="network namespaces need root and `ip netns`; the fallback is tested below")


def _receive_time_s(cluster, sender: str, receiver: str) -> float:
    """Seconds `receiver` takes to read PAYLOAD_BYTES that `sender` sends it over TCP."""
    address = (cluster.node(receiver).ip, RECEIVER_PORT)
    receive = ("import socket, time\n"
               f"server = socket.create_server({address!r})\n"
               "print('listening', flush=True)\n"
               "peer, _ = server.accept()\n"
               "started, received = time.perf_counter(), 0\n"
               "while chunk := peer.recv(1 << 16):\n"
               "    received += len(chunk)\n"
               "print(received, time.perf_counter() - started)\n")
    server = subprocess.Popen(cluster.command_in(receiver, [sys.executable, "-c", receive]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        send = (f"import socket; socket.create_connection({address!r}).sendall("
                f"bytes({PAYLOAD_BYTES}))")
        sent = cluster.run_in(sender, [sys.executable, "-c", send], timeout=hang_limit(60))
        assert sent.returncode == 0
        received, seconds = server.communicate(timeout=hang_limit(60))[0].split()
    finally:
        server.kill()
    assert int(received) == PAYLOAD_BYTES
    return float(seconds)


@needs_namespaces
def test_each_node_has_its_own_address_rate_and_view_and_nothing_is_left(tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    (private / "shared.txt").write_text("every node but the last sees this")
    started = time.monotonic()
    with netns_cluster.netns_cluster(2, 1, rate=RATE, private_path=str(private)) as cluster:
        start_s = time.monotonic() - started
        assert cluster.kind == "netns" and cluster.head_address == "198.51.100.1:6379"
        for node, ip in zip(cluster.nodes, ["198.51.100.1", "198.51.100.2"]):
            addresses = cluster.run_in(node.name, ["ip", "-4", "-o", "addr"]).stdout
            assert f"inet {ip}/24" in addresses and "127.0.0.1" in addresses
            # The subnet's own route and no other: nothing outside is reachable.
            routes = cluster.run_in(node.name, ["ip", "route"]).stdout.strip().splitlines()
            assert routes == [f"198.51.100.0/24 dev veth0 proto kernel scope link src {ip}"]
            qdisc = cluster.run_in(node.name, ["tc", "qdisc", "show", "dev", "veth0"]).stdout
            assert "tbf" in qdisc and "rate 20Mbit" in qdisc, qdisc
        seconds = _receive_time_s(cluster, "w1", "head")
        assert seconds > 0.8 * PAYLOAD_BYTES / RATE_BYTES_PER_S, seconds
        assert cluster.private_node == "w1"
        assert cluster.run_in("head", ["ls", str(private)]).stdout.split() == ["shared.txt"]
        assert cluster.run_in("w1", ["ls", "-A", str(private)]).stdout.split() == []
        ids = cluster.node_ids()
        assert len(set(ids.values())) == 2
        pids = cluster.pids()
        assert len(pids) > 4  # two `ray start`s and their raylets, GCS, agents...
        stop_started = time.monotonic()
    stop_s = time.monotonic() - stop_started
    assert cluster.leftovers(pids) == ([], [])
    assert "198.51.100." not in subprocess.run(["ip", "addr"], capture_output=True,
                                               text=True).stdout
    assert not Path(cluster.temp_dir).exists()
    assert (private / "shared.txt").exists()  # the tmpfs hid it, and went with its node
    print(f"2 nodes up in {start_s:.1f} s, down in {stop_s:.1f} s; "
          f"{PAYLOAD_BYTES} B at {RATE} in {seconds:.2f} s")


def test_without_namespaces_ray_cluster_utils_makes_the_nodes():
    with netns_cluster.netns_cluster(2, 1, use_namespaces=False) as cluster:
        assert cluster.kind == "ray.cluster_utils" and cluster.namespaces == []
        count = ("import ray; ray.init(logging_level='ERROR'); "
                 "print(len([node for node in ray.nodes() if node['Alive']]))")
        run = cluster.run_in("head", [sys.executable, "-c", count],
                             timeout=hang_limit(120))
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split()[-1] == "2"
        assert len(set(cluster.node_ids().values())) == 2
        pids = {process.process.pid for ray_node in cluster._fallback_nodes
                for processes in ray_node.all_processes.values() for process in processes}
        gcs_address = cluster._fallback.gcs_address
    assert not [pid for pid in pids if netns_cluster._alive(pid)]
    # Nor this process's Ray key-value store on the gone GCS: Tune's exit hook
    # waited on it 60 s, then ended CI's pytest with status 1 (stop 84).
    store = internal_kv.internal_kv_get_gcs_client()
    assert store is None or store.address != gcs_address
