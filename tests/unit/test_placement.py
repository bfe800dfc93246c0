"""Node-disjoint trials (driver/placement.py, plan.fit_to_cluster): on like
nodes each trial's workers reserve whole nodes, as many trials run at once as
there are nodes, and where that cannot hold the plan falls back to one trial
at a time (or to --max-concurrent-trials, timed side by side)."""

import pytest

from orchestrator.config import cli
from orchestrator.driver import checks, placement, plan, plan_text
from orchestrator.driver.cluster import Cluster


def _cluster(*nodes: dict) -> Cluster:
    return Cluster(address=None, dashboard_url=None, node_resources=tuple(nodes))


def _fit(tmp_path, cluster: Cluster, *argv: str) -> plan.SweepPlan:
    args = cli.sweep_parser("").parse_args([*argv, "--out", str(tmp_path / "out")])
    return plan.fit_to_cluster(checks.sweep_request(args), cluster)


def _where(fitted: plan.SweepPlan) -> dict:
    return {count: (where.num_nodes, where.workers_per_node, where.strategy,
                    where.resources_per_worker) for count, where in fitted.placements.items()}


def test_the_scaling_preset_on_8_nodes_of_8_gpus_gives_each_trial_whole_nodes(tmp_path):
    node = {"CPU": 32.0, "GPU": 8.0, "memory": 2e11}
    fitted = _fit(tmp_path, _cluster(*[node] * 8), "--preset", "scaling")
    assert fitted.sweep.workers == (1, 2, 4, 8, 16, 32, 64)
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (8, False)
    assert fitted.placement_nodes == 8  # what the estimate of the time left shares out
    where = _where(fitted)
    # Up to a node: one node, its 32 CPUs shared out, a GPU each, all on that node.
    assert where[1] == (1, 1, "STRICT_PACK", {"CPU": 32.0, "GPU": 1.0})
    assert where[4] == (1, 4, "STRICT_PACK", {"CPU": 8.0, "GPU": 1.0})
    assert where[8] == (1, 8, "STRICT_PACK", {"CPU": 4.0, "GPU": 1.0})
    # Past a node: whole nodes, 8 workers on each.
    assert where[16] == (2, 8, "PACK", {"CPU": 4.0, "GPU": 1.0})
    assert where[64] == (8, 8, "PACK", {"CPU": 4.0, "GPU": 1.0})
    assert plan_text.timing_line(fitted) == (
        "each trial timed on whole nodes of its own, up to 8 trials at a time on disjoint nodes")


def test_a_2_worker_trial_on_2_cpu_nodes_keeps_its_1_cpu_workers(tmp_path):
    fitted = _fit(tmp_path, _cluster(*[{"CPU": 2.0}] * 3), "--workers", "1,2")
    assert fitted.max_concurrent_trials == 2  # 3 nodes, but the sweep's 2 trials
    assert _where(fitted) == {1: (1, 1, "STRICT_PACK", {"CPU": 2.0}),
                              2: (1, 2, "STRICT_PACK", {"CPU": 1.0})}
    # The reservation is about the node; the worker's torch threads stay as set.
    assert fitted.sweep.base.threads_per_worker == 1


def test_a_head_without_cpus_is_no_node_of_the_trials(tmp_path):
    cluster = _cluster({"CPU": 0.0}, {"CPU": 1.0}, {"CPU": 1.0})
    fitted = _fit(tmp_path, cluster, "--workers", "1,2")
    assert fitted.max_concurrent_trials == 2
    assert _where(fitted) == {1: (1, 1, "STRICT_PACK", {"CPU": 1.0}),
                              2: (2, 1, "PACK", {"CPU": 1.0})}


def test_shares_round_down_to_rays_resource_unit_and_splits_are_even():
    three = placement.whole_nodes({"CPU": 8.0}, 4, 3, {"CPU": 1.0})
    assert three.resources_per_worker == {"CPU": 2.6666}  # 3 x 2.6666 <= 8
    # 6 workers on nodes of 4: two nodes of 3, never 4 + 2.
    six = placement.whole_nodes({"CPU": 4.0}, 4, 6, {"CPU": 1.0})
    assert (six.num_nodes, six.workers_per_node, six.resources_per_worker) == (
        2, 3, {"CPU": 1.3333})
    # 5 on nodes of 4 split evenly only over 5 nodes: with 4, no placement.
    assert placement.whole_nodes({"CPU": 4.0}, 4, 5, {"CPU": 1.0}) is None
    assert placement.whole_nodes({"CPU": 4.0}, 5, 5, {"CPU": 1.0}).num_nodes == 5
    # threads_per_worker 2: two workers fill a node of 4 CPUs with 2 CPUs each.
    assert placement.whole_nodes({"CPU": 4.0}, 2, 2, {"CPU": 2.0}).num_nodes == 1


@pytest.mark.parametrize("nodes, argv", [
    ([{"CPU": 4.0}, {"CPU": 2.0}], ["--workers", "1,2"]),  # nodes that differ
    ([{"CPU": 4.0}] * 4, ["--workers", "1,5"]),  # 5 workers: no even split of 4 nodes
    ([{"CPU": 8.0}], ["--workers", "1,2"]),  # one node: as before
])
def test_without_an_even_split_of_like_nodes_a_speedup_runs_one_trial_at_a_time(
        tmp_path, nodes, argv):
    fitted = _fit(tmp_path, _cluster(*nodes), *argv)
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.placements) == (
        1, False, None)


def test_max_concurrent_trials_overrides_the_placement_and_the_report_says_side_by_side(
        tmp_path):
    fitted = _fit(tmp_path, _cluster(*[{"CPU": 2.0}] * 3), "--workers", "1,2",
                  "--lr", "0.1,0.2", "--max-concurrent-trials", "4")
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.placements) == (
        4, True, None)
    assert "up to 4 trials side by side, sharing nodes" in plan_text.timing_line(fitted)
