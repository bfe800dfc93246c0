"""A local storage on a cluster of several nodes: checked before any trial
that every node sees it (tools/netns_cluster.py, its last node given a
private view of the path)."""

import sys

import pytest

from helpers import REPO, hang_limit, import_tool, sweep_on

netns_cluster = import_tool("netns_cluster")

pytestmark = [pytest.mark.skipif(
    not netns_cluster.namespaces_available(),
    reason="a private path needs network and mount namespaces (root)")]

CHECK = ("import sys, ray; from orchestrator.driver import storage; ray.init(); "
         "storage.require_seen_by_every_node(sys.argv[1]); print('seen by every node')")


@pytest.mark.reliability(fault="sweep.py and train.py on a 2-node cluster whose second node "
                               "does not see the storage (sweep: the default <out>/ray)",
                         lost="nothing")
def test_a_storage_one_node_cannot_see_is_one_line_naming_that_node(tmp_path):
    out_dir = tmp_path / "out"
    # The last node sees --out, and so the default storage <out>/ray in it, as an empty tmpfs.
    with netns_cluster.netns_cluster(2, 1, private_path=str(out_dir)) as cluster:
        ids = cluster.node_ids()
        run = sweep_on(cluster, "--workers", "1", "--epochs", "1", "--train-limit", "2048",
                       "--test-limit", "500", "--batch-size", "64", "--lr", "0.1",
                       "--no-calibrate", "--out", str(out_dir), timeout_s=300)
        assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
        # Ray's own lines on connecting come first; ours is one line, the last.
        line = run.stderr.strip().splitlines()[-1]
        assert [text for text in run.stderr.splitlines() if "error" in text] == [line]
        assert f"storage {out_dir / 'ray'} is not seen by every node" in line, line
        assert f"node {ids['w1']} at {cluster.node('w1').ip}" in line, line
        assert "shared path" in line and "bucket URI" in line, line
        assert "trial" not in run.stdout  # no trial was planned, let alone run
        # The marker and the folder made for it are gone; --out is as it was.
        assert list(out_dir.iterdir()) == []

        # train.py checks its --storage the same way.
        run = cluster.run_in("head", [
            sys.executable, "experiments/train.py", "--address", cluster.head_address,
            "--workers", "1", "--epochs", "1", "--train-limit", "2048", "--test-limit", "500",
            "--storage", str(out_dir / "runs")], cwd=REPO, timeout=hang_limit(300))
        assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
        line = run.stderr.strip().splitlines()[-1]
        assert f"storage {out_dir / 'runs'} is not seen by every node" in line, line
        assert "epoch" not in run.stdout.lower()
        assert list(out_dir.iterdir()) == []

        # A folder every node shares passes, and is left as it was.
        shared = tmp_path / "shared"
        check = cluster.run_in("head", [sys.executable, "-c", CHECK, str(shared / "ray")],
                               cwd=REPO, timeout=hang_limit(120))
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-3000:]
        assert check.stdout.strip().splitlines()[-1] == "seen by every node"
        assert not shared.exists()
        pids = cluster.pids()
    assert cluster.leftovers(pids) == ([], [])
