"""scale_up.py without Ray: what a `--wait-for-nodes` asks the autoscaler for, and
no request where the nodes up hold it. (tests/cluster/test_autoscaling.py: the
wait on a real autoscaler.)"""

import re
import sys

import pytest

from orchestrator.config.options import TrainConfig
from orchestrator.driver import scale_up
from orchestrator.driver.cluster import Cluster


def test_each_shape_of_worker_is_asked_for_at_its_largest_run():
    """The exercises' threads point: one worker of all a node's CPUs beside runs of
    one CPU each; waiting for the most workers alone left it unfitted."""
    runs = [TrainConfig(num_workers=1, threads_per_worker=4), TrainConfig(num_workers=2),
            TrainConfig(num_workers=4), TrainConfig(num_workers=3, use_gpu=True)]
    assert scale_up.largest_runs(runs) == {(("CPU", 4.0),): 1, (("CPU", 1.0),): 4,
                                           (("CPU", 1.0), ("GPU", 1.0)): 3}


def test_nodes_that_hold_the_runs_already_are_not_asked_for(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # any import of Ray would fail
    cluster = Cluster(address="10.0.0.1:6379", dashboard_url=None,
                      node_resources=({"CPU": 4.0}, {"CPU": 8.0, "GPU": 2.0}))
    runs = [TrainConfig(num_workers=2, use_gpu=True), TrainConfig(num_workers=1)]
    assert scale_up.wait_for_nodes(cluster, runs, 60) is cluster
    assert capsys.readouterr().out == (
        "--wait-for-nodes: the nodes up hold the 2 workers of {1 CPU, 1 GPU} and 1 worker of "
        "{1 CPU} already\n")


def _cluster_of(*nodes: dict) -> Cluster:
    return Cluster(address="10.0.0.1:6379", dashboard_url=None, node_resources=tuple(nodes))


def test_a_wait_that_runs_out_fits_the_plan_to_the_nodes_up_and_withdraws_the_request(
        capsys, monkeypatch):
    """The autoscaler (a stand-in here: the real one is in tests/cluster) starts one
    GPU node of the two asked for, then no more."""
    import ray.autoscaler.sdk
    sent = []
    monkeypatch.setattr(ray.autoscaler.sdk, "request_resources",
                        lambda bundles: sent.append(bundles))
    looks = iter([({"CPU": 1.0},), ({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0})])
    monkeypatch.setattr(scale_up, "alive_node_resources",
                        lambda: next(looks, ({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0})))
    monkeypatch.setattr(scale_up, "POLL_S", 0.01)
    head = _cluster_of({"CPU": 1.0})
    waited = scale_up.wait_for_nodes(head, [TrainConfig(num_workers=2, use_gpu=True)], 1)
    assert waited.max_workers({"CPU": 1.0, "GPU": 1.0}) == 1
    gpu_worker = {"CPU": 1.0, "GPU": 1.0}
    # Sent again at every look (Ray Train's coordinator replaces it), then withdrawn.
    assert len(sent) >= 3 and all(bundles == [gpu_worker] * 2 for bundles in sent[:-1])
    assert sent[-1] == []
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("asking the cluster's autoscaler for 2 workers of {1 CPU, 1 GPU} (the "
                      "nodes up hold 0 of the 2 workers) and waiting up to 1 s for their nodes")
    assert re.fullmatch(r"after \d+ s: Ray cluster at 10\.0\.0\.1:6379: 2 nodes, 2 CPUs, 1 GPU, "
                        r"room for 1 of the 2 workers", out[1]), out
    assert out[2:] == ["--wait-for-nodes: after 1 s the nodes up hold 1 of the 2 workers: "
                       "the plan is fitted to them"]


def test_a_ctrl_c_while_waiting_withdraws_the_request(monkeypatch):
    import ray.autoscaler.sdk
    sent = []
    monkeypatch.setattr(ray.autoscaler.sdk, "request_resources",
                        lambda bundles: sent.append(bundles))

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(scale_up, "alive_node_resources", interrupted)
    monkeypatch.setattr(scale_up, "POLL_S", 0.01)
    with pytest.raises(KeyboardInterrupt):
        scale_up.wait_for_nodes(_cluster_of({"CPU": 1.0}), [TrainConfig(num_workers=2)], 60)
    assert sent == [[{"CPU": 1.0}] * 2, []]
