"""The plan fitted to a cluster: GPUs, open worker counts, room and concurrency,
decided once from what the cluster's nodes hold (a `Cluster` as `connect` returns it)."""

import pytest

from orchestrator.config import cli
from orchestrator.driver import jobs
from orchestrator.driver import plan
from orchestrator.driver.cluster import Cluster
from orchestrator.errors import UserError


def _cluster(*nodes: dict) -> Cluster:
    return Cluster(address=None, dashboard_url=None, node_resources=tuple(nodes))


def _request(tmp_path, *argv: str) -> plan.SweepRequest:
    return plan.sweep_request(cli.sweep_parser("").parse_args([*argv, "--out", str(tmp_path / "out")]))


def test_the_scaling_preset_takes_worker_counts_up_to_what_the_cluster_holds(tmp_path):
    request = _request(tmp_path, "--preset", "scaling")
    fitted = plan.fit_to_cluster(request, _cluster({"CPU": 4.0}, {"CPU": 2.0}))
    assert fitted.sweep.workers == (1, 2, 4, 6)
    assert fitted.max_concurrent_trials == 1  # the largest trial takes every CPU
    assert not fitted.sweep.base.use_gpu  # auto, and the cluster has no GPU


def test_a_sweep_that_reports_speedup_times_one_trial_at_a_time(tmp_path):
    # 8 CPUs hold four 2-worker trials, but side by side they would crowd
    # each other's timings: the speedup of 2 workers over 1 would be wrong.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1,2"), _cluster({"CPU": 8.0}))
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (1, False)
    assert jobs.timing_line(fitted) == "each trial timed with its nodes to itself"
    # Asked for, they run side by side, and the plan says so (report.md prints it).
    request = _request(tmp_path, "--workers", "1,2", "--max-concurrent-trials", "3")
    fitted = plan.fit_to_cluster(request, _cluster({"CPU": 8.0}))
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (3, True)
    assert "up to 3 trials side by side, sharing nodes" in jobs.timing_line(fitted)


def test_trials_share_nothing_when_every_node_holds_one_worker(tmp_path):
    request = _request(tmp_path, "--workers", "1,2", "--use-gpu", "auto")
    fitted = plan.fit_to_cluster(request, _cluster(*[{"CPU": 4.0, "GPU": 1.0}] * 4))
    # Each trial on whole nodes of its own (tests/unit/test_placement.py): one per node.
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (4, False)


def test_one_worker_count_runs_side_by_side_as_far_as_the_largest_fits(tmp_path):
    request = _request(tmp_path, "--workers", "2", "--lr", "0.1,0.2,0.4,0.8,1.6")
    fitted = plan.fit_to_cluster(request, _cluster({"CPU": 8.0}))
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (4, True)


def test_auto_gpu_follows_the_cluster_and_a_no_stays_no(tmp_path):
    gpu_node = {"CPU": 8.0, "GPU": 2.0}
    assert plan.fit_to_cluster(_request(tmp_path), _cluster(gpu_node)).sweep.base.use_gpu
    request = _request(tmp_path, "--use-gpu", "no")
    assert not plan.fit_to_cluster(request, _cluster(gpu_node)).sweep.base.use_gpu


def test_a_grid_point_no_node_set_can_hold_is_refused(tmp_path):
    request = _request(tmp_path, "--workers", "1,4")
    with pytest.raises(UserError, match="the grid point with 4 workers needs 4 workers"):
        plan.fit_to_cluster(request, _cluster({"CPU": 2.0}, {"CPU": 1.0}))


def test_a_config_file_without_use_gpu_follows_the_cluster_like_the_command_line(tmp_path):
    config = tmp_path / "sweep-options.json"
    config.write_text('{"workers": [1, 2]}')
    fitted = plan.fit_to_cluster(_request(tmp_path, "--config", str(config)),
                                 _cluster({"CPU": 8.0, "GPU": 2.0}))
    assert fitted.sweep.base.use_gpu
    config.write_text('{"workers": [1, 2], "use_gpu": false}')
    fitted = plan.fit_to_cluster(_request(tmp_path, "--config", str(config)),
                                 _cluster({"CPU": 8.0, "GPU": 2.0}))
    assert not fitted.sweep.base.use_gpu
