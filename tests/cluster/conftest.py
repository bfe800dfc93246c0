"""Fixtures of the cluster layer: a multi-node Ray cluster made on this machine."""

import importlib.util

import pytest

from helpers import import_tool

netns_cluster = import_tool("netns_cluster")


@pytest.fixture(scope="module")
def three_node_cluster():
    """A head of no CPU and two worker nodes of one CPU each, each with an address
    of its own (in namespaces as root; else ray.cluster_utils), torn down after
    the module's tests, and checked to leave nothing behind."""
    if not netns_cluster.namespaces_available() and not importlib.util.find_spec(
            "ray.cluster_utils"):
        pytest.skip("neither network namespaces (they need root) nor ray.cluster_utils")
    with netns_cluster.netns_cluster(3, 1, head_cpus=0) as cluster:
        yield cluster
        pids = cluster.pids()  # the tests' Ray workers included
    assert cluster.leftovers(pids) == ([], [])
