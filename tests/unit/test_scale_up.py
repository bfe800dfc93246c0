"""scale_up.py without Ray: what a `--wait-for-nodes` asks the autoscaler for, and
no request where the nodes up hold it. (tests/cluster/test_autoscaling.py: the
wait on a real autoscaler.)"""

import sys

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
