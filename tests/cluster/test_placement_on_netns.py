"""Trials on disjoint nodes (driver/placement.py) on a multi-node cluster made
on this machine: two 1-worker trials run at once, one per worker node; a
2-worker trial gets both nodes to itself; and from the recorded node ids and
times no two trials that overlapped shared a node."""

import ast

import pandas as pd

from helpers import sweep_on
from orchestrator.report import timeline


def test_trials_run_side_by_side_on_disjoint_nodes(three_node_cluster, tmp_path):
    cluster = three_node_cluster
    out_dir = tmp_path / "out"
    # 256 steps a 1-worker epoch, not 32: the second 1-worker trial's workers start
    # seconds after the first's (5 s in the run that missed), and with 32 steps
    # (about 2 s here) the first had ended its training 0.2 s before the second
    # began: a trial's span is its training, from its loop's start to its last epoch.
    run = sweep_on(cluster, "--workers", "1,2", "--lr", "0.1,0.2", "--epochs", "1",
                   "--train-limit", "16384", "--test-limit", "500", "--batch-size", "64",
                   "--no-calibrate", "--out", str(out_dir), "--storage", str(tmp_path / "storage"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"Ray cluster at {cluster.head_address}: 3 nodes, 2 CPUs" in run.stdout
    assert "4 trials, up to 2 at a time, workers on CPUs (gloo):" in run.stdout
    assert "1 worker, global batch 64 (64/worker), lr 0.1" in run.stdout
    assert "on 1 whole node (1 CPU reserved per worker)" in run.stdout
    assert "on 2 whole nodes (1 CPU reserved per worker)" in run.stdout
    ids = cluster.node_ids()
    workers = {ids["w1"], ids["w2"]}
    trials = pd.read_csv(out_dir / "trials.csv").set_index("trial_id")
    assert (trials["status"] == "finished").all()
    for trial_id, row in trials.iterrows():
        nodes = row["nodes"].split()
        assert len(nodes) == row["num_workers"] and set(nodes) <= workers, (trial_id, nodes)
    # A 2-worker trial spans the two worker nodes (the head has no CPU), and its
    # epochs say which worker ran where.
    epochs = pd.read_csv(out_dir / "epochs.csv")
    for _, epoch in epochs[epochs["num_workers"] == 2].iterrows():
        worker_nodes = ast.literal_eval(epoch["worker_nodes"])
        assert sorted(worker_nodes) == sorted(workers)
        assert trials.loc[epoch["trial_id"], "nodes"] == " ".join(worker_nodes)
    spans = timeline.trial_spans(epochs)
    assert set(spans["trial_id"]) == set(trials.index)
    # The two 1-worker trials, first in the grid, ran together, one per node.
    assert timeline.max_trials_at_once(spans) >= 2
    assert timeline.shared_nodes(spans) == []
    report = (out_dir / "report.md").read_text()
    assert "each trial timed on whole nodes of its own, up to 2 trials at a time" in report
    assert "Trials at once: at most 2, on 2 nodes; no two trials shared a node" in report
    assert (out_dir / "timeline.png").stat().st_size > 5_000
