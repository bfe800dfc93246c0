"""The plan fitted to a cluster: GPUs, open worker counts, room and concurrency,
decided once from what the cluster's nodes hold (a `Cluster` as `connect` returns it)."""

import dataclasses
import re

import pytest
import torch

from orchestrator.config import cli
from orchestrator.driver import checks, model_check, placement, plan, plan_text
from orchestrator.driver.cluster import Cluster
from orchestrator.config.options import TrainConfig
from orchestrator.errors import UserError
from orchestrator.records import si_text
from orchestrator.training import graphed


def _cluster(*nodes: dict) -> Cluster:
    return Cluster(address=None, dashboard_url=None, node_resources=tuple(nodes))


def _request(tmp_path, *argv: str) -> checks.SweepRequest:
    return checks.sweep_request(cli.sweep_parser("").parse_args([*argv, "--out", str(tmp_path / "out")]))


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
    assert plan_text.timing_line(fitted) == "each trial timed with its nodes to itself"
    # Asked for, they run side by side, and the plan says so (report.md prints it).
    request = _request(tmp_path, "--workers", "1,2", "--lr", "0.1,0.2",
                       "--max-concurrent-trials", "3")
    fitted = plan.fit_to_cluster(request, _cluster({"CPU": 8.0}))
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (3, True)
    assert "up to 3 trials side by side, sharing nodes" in plan_text.timing_line(fitted)


def test_the_plan_tells_replicas_apart_by_their_seed(tmp_path, capsys):
    for argv, seeds in ((["--repeats", "2"], ["seed 0, ", "seed 0, ", "seed 1, ", "seed 1, "]),
                        (["--seed", "3"], ["", ""])):
        fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1,2", *argv),
                                     _cluster({"CPU": 2.0}))
        plan_text.print_plan(fitted)
        lines = [line for line in capsys.readouterr().out.splitlines()
                 if re.match(r"  \d+ workers?, ", line)]
        assert [line.split("fp32, ")[1].split("10 epochs")[0] for line in lines] == seeds


def test_trials_share_nothing_when_every_node_holds_one_worker(tmp_path):
    request = _request(tmp_path, "--workers", "1,2", "--lr", "0.1,0.2", "--use-gpu", "auto")
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


ONE_GPU = {"CPU": 16.0, "GPU": 1.0}
GPU = torch.device("cuda", 0)  # only named: nothing here runs on it


def test_the_main_job_on_one_gpu_runs_what_fits_and_names_what_does_not(tmp_path):
    """The README's main command (the d2l-13.5 preset, 1 and 2 workers) on a
    machine of one GPU: the 1-worker trial runs, the 2-worker one is left out,
    named with the reason (report.md estimates it)."""
    fitted = plan.fit_to_cluster(_request(tmp_path), _cluster(ONE_GPU))
    assert fitted.sweep.base.use_gpu and fitted.sweep.workers == (1,)
    assert [point.train.num_workers for point in fitted.sweep.grid] == [1]
    (cell,) = fitted.left_out
    assert cell.reason == "2 workers need 2 GPUs; this cluster has 1: not run"
    assert cell.line == ("2 workers, global batch 256 (128/worker), lr 0.2, lenet, sync scratch, "
                         "fp32: 2 workers need 2 GPUs; this cluster has 1: not run")
    assert fitted.sweep.grid[0].train.backend == "nccl"
    # 13.6's preset: b per GPU, lr scaled linearly: the 2-GPU point is batch 512 at lr 0.2.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "d2l-13.6"), _cluster(ONE_GPU))
    assert [(c.num_workers, c.global_batch_size, c.lr, c.model) for c in fitted.left_out] == [
        (2, 512, 0.2, "resnet18")]
    # Seeds replicate a point; its left-out cell is one.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--repeats", "3"), _cluster(ONE_GPU))
    assert len(fitted.sweep.grid) == 3 and len(fitted.left_out) == 1
    # Where everything fits, nothing is left out.
    assert plan.fit_to_cluster(_request(tmp_path), _cluster({"CPU": 4.0, "GPU": 2.0})
                               ).left_out == ()


def test_workers_the_user_gave_that_cannot_fit_are_refused_with_the_ways_out(tmp_path):
    for argv in (["--workers", "2"], ["--workers", "1,2"], ["--preset", "d2l-13.6",
                                                              "--workers", "1,2"]):
        with pytest.raises(UserError) as refused:
            plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(ONE_GPU))
        message = str(refused.value)
        assert "needs 2 workers of {1 CPU, 1 GPU} each" in message and "\n" not in message
        assert "--gpus-per-worker 0.5" in message and "--use-gpu no" in message
    config = tmp_path / "sweep-options.json"
    config.write_text('{"workers": [1, 2]}')  # a file's worker counts are the user's too
    with pytest.raises(UserError, match="--gpus-per-worker 0.5"):
        plan.fit_to_cluster(_request(tmp_path, "--config", str(config)), _cluster(ONE_GPU))
    # train.py: its --workers is always the user's.
    config = TrainConfig(num_workers=3, use_gpu=True)
    with pytest.raises(UserError, match=r"put 3 workers on 1 GPU give --gpus-per-worker 0.333"):
        plan.fit_run_to_cluster(config, False, _cluster(ONE_GPU))


def test_workers_that_share_a_gpu_fit_and_sum_over_gloo(tmp_path):
    request = _request(tmp_path, "--workers", "1,2", "--gpus-per-worker", "0.5")
    fitted = plan.fit_to_cluster(request, _cluster(ONE_GPU))
    assert fitted.left_out == ()
    one, two = (point.train for point in fitted.sweep.grid)
    assert two.resources_per_worker == {"CPU": 1.0, "GPU": 0.5}
    # NCCL refuses two ranks on one device; one worker alone keeps NCCL.
    assert (one.backend, two.backend) == ("nccl", "gloo")
    assert "workers may share a GPU (gloo" in plan_text.workers_text(two)
    config = TrainConfig(num_workers=3, use_gpu=True, gpus_per_worker=1 / 3)
    assert plan.fit_run_to_cluster(config, False, _cluster(ONE_GPU)).backend == "gloo"
    # Above half a GPU each no two fit one: each owns its GPU, and NCCL sums.
    roomy = dataclasses.replace(config, num_workers=2, gpus_per_worker=0.6)
    fitted = plan.fit_run_to_cluster(roomy, False, _cluster({**ONE_GPU, "GPU": 2.0}))
    assert fitted.backend == "nccl" and not fitted.shares_gpu
    assert plan_text.workers_text(fitted) == "GPUs, 0.6 of one each: no two fit one GPU (NCCL)"
    # A share is for GPU workers: on a cluster without GPUs, `auto` makes CPU ones.
    with pytest.raises(UserError, match="--gpus-per-worker 0.5 is for GPU workers"):
        plan.fit_to_cluster(request, _cluster({"CPU": 4.0}))


def test_the_exercises_on_one_gpu_share_it_between_two_workers(tmp_path, capsys):
    """Issue 38's item 1: `--preset exercises` on a machine of one GPU answers what it
    can. Its worker counts come from the cluster, which holds one GPU worker: every
    2-worker part would vanish. Two workers sharing the GPU answer the questions
    that compare accuracies; no speedup is read from them (report/summary.py)."""
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "exercises"),
                                 _cluster({"CPU": 16.0, "GPU": 1.0}))
    assert fitted.shared_gpu and fitted.sweep.workers == (1, 2) and fitted.left_out == ()
    parts = {(point.part, point.train.num_workers) for point in fitted.sweep.grid}
    assert {("batch-lr", 2), ("warmup", 2), ("delayed", 2), ("split", 2)} <= parts
    assert {point.train.backend for point in fitted.sweep.grid
            if point.train.num_workers == 2} == {"gloo"}
    assert fitted.max_concurrent_trials == 1
    plan_text.print_plan(fitted)
    assert ("one GPU: the exercises' 2-worker trials share it, 0.5 of it each (gloo): their "
            "accuracies answer the questions that compare them; no speedup is read from them, "
            "and the scaling model forecasts GPUs of their own (a what-if); `--workers 1` "
            "runs 1 worker only") in capsys.readouterr().out.splitlines()
    # The same halves asked for, or a resumed sweep's (its fitted sweep: workers given).
    for argv in (("--preset", "exercises", "--gpus-per-worker", "0.5"),
                 ("--preset", "exercises", "--gpus-per-worker", "0.5", "--workers", "1,2")):
        fitted = plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(ONE_GPU))
        assert fitted.shared_gpu and fitted.sweep.workers == (1, 2), argv
    # Not where each worker can have a GPU, nor for the user's own worker counts, nor
    # for another preset, nor where the CPUs hold one worker only.
    for argv, nodes in ((("--preset", "exercises"), {"CPU": 16.0, "GPU": 2.0}),
                        (("--preset", "exercises", "--workers", "1"), ONE_GPU),
                        (("--preset", "scaling"), {"CPU": 16.0, "GPU": 1.0}),
                        (("--preset", "exercises"), {"CPU": 1.0, "GPU": 1.0})):
        fitted = plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(nodes))
        assert not fitted.shared_gpu and fitted.sweep.base.gpus_per_worker == 1, argv


def test_a_cpu_grid_point_too_big_for_the_nodes_says_which_resource(tmp_path):
    # A preset's 2 workers of 2 threads on one node of 2 CPUs: left out, in CPUs.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--threads-per-worker", "2"),
                                 _cluster({"CPU": 2.0}))
    assert [cell.reason for cell in fitted.left_out] == [
        "2 workers need 4 CPUs; this cluster has 2: not run"]
    # Enough CPUs in all, but no node holds a whole worker of 3 threads and the
    # cluster only one: the room is named too.
    assert plan.shortfall(_cluster({"CPU": 3.0}, {"CPU": 2.0}, {"CPU": 2.0}), 2, {"CPU": 3.0}) == (
        "2 workers need 6 CPUs; this cluster has 7, room for 1 such worker: not run")


CPU_STARVED = {"CPU": 4.0, "GPU": 8.0}
NODE_OF_EIGHT = {"CPU": 16.0, "GPU": 8.0}
CPU_NODE = {"CPU": 8.0}


def test_gpu_counts_follow_the_gpus_and_those_the_cpus_cannot_hold_are_named(tmp_path):
    """A node of 8 GPUs and 4 CPUs: the preset's counts go up to 8, as the devices
    do, and 8 (1 CPU each) is left out, named in CPUs, not dropped in silence."""
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "scaling"), _cluster(CPU_STARVED))
    assert fitted.sweep.workers == (1, 2, 4)
    assert {cell.reason for cell in fitted.left_out} == {
        "8 workers need 8 CPUs; this cluster has 4: not run"}
    assert {cell.num_workers for cell in fitted.left_out} == {8}
    # The most the CPUs hold runs too: 6 CPUs run 1, 2, 4 and 6 workers.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "scaling"),
                                 _cluster({"CPU": 6.0, "GPU": 8.0}))
    assert fitted.sweep.workers == (1, 2, 4, 6)
    assert {cell.num_workers for cell in fitted.left_out} == {8}


def test_a_refusal_names_the_ways_out_of_the_resource_that_is_short(tmp_path):
    def refusal(*nodes_and_argv):
        nodes = [item for item in nodes_and_argv if isinstance(item, dict)]
        argv = [item for item in nodes_and_argv if isinstance(item, str)]
        with pytest.raises(UserError) as refused:
            plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(*nodes))
        assert "\n" not in str(refused.value)
        return str(refused.value)

    # CPUs short, GPUs enough: no GPU share, no CPU workers (they need CPUs too).
    message = refusal(CPU_STARVED, "--workers", "8")
    assert message.endswith("8 workers need 8 CPUs (1 each), this cluster has 4: give fewer "
                            "--workers, or start the GPU nodes with more logical CPUs (`ray "
                            "start --num-cpus N`), or attach to a cluster with more CPUs "
                            "(--address)"), message
    assert "--gpus-per-worker" not in message and "--use-gpu no" not in message
    message = refusal(NODE_OF_EIGHT, "--workers", "6", "--threads-per-worker", "3")
    assert "6 workers need 18 CPUs (3 each), this cluster has 16: give fewer --workers or " \
           "--threads-per-worker" in message
    # Enough CPUs in all, not on whole nodes: the room is named.
    message = refusal({"CPU": 3.0, "GPU": 2.0}, {"CPU": 3.0, "GPU": 2.0}, "--workers", "3",
                      "--threads-per-worker", "2")
    assert "3 workers need 6 CPUs (2 each), this cluster has 6, room for 2 such workers" in message
    # Enough of each, not on the same nodes (the CPUs are the head's).
    message = refusal({"CPU": 64.0}, {"CPU": 4.0, "GPU": 8.0}, "--workers", "8")
    assert ("each worker needs 1 CPU and 1 GPU on one node, and the GPU nodes' CPUs hold 4 "
            "such workers: give fewer --workers") in message
    # Both short: the share that fits the GPUs, and the CPUs it still lacks.
    message = refusal(NODE_OF_EIGHT, "--workers", "20", "--gpus-per-worker", "0.5")
    assert "to put 20 workers on 8 GPUs give --gpus-per-worker 0.333" in message
    assert "; and 20 workers need 20 CPUs, this cluster has 16: give fewer --workers" in message
    assert "--use-gpu no" not in message


def test_gpu_workers_on_a_cluster_with_no_gpu_up_are_not_offered_a_share_of_none(tmp_path):
    """An autoscaling cluster's GPU nodes down when the job attached: the refusal
    offered "to put 2 workers on 0 GPUs give --gpus-per-worker 0.5" (found by
    tests/cluster/test_autoscaling.py). An attached cluster's ways name
    --wait-for-nodes; an embedded one has no autoscaler to wait for."""
    def refusal(cluster, num_workers=2, resources=(("CPU", 1.0), ("GPU", 1.0))) -> str:
        with pytest.raises(UserError) as refused:  # `--use-gpu yes`, not checked here
            cluster.require_room(num_workers, dict(resources))
        return str(refused.value)

    attached = dataclasses.replace(_cluster({"CPU": 4.0}), address="10.0.0.1:6379")
    assert refusal(attached).endswith(
        "can hold at most 0 such workers; this cluster has no GPU up: give --use-gpu no (CPU "
        "workers), or --wait-for-nodes S where its autoscaler starts GPU nodes on demand, or "
        "attach to a cluster with GPUs (--address)"), refusal(attached)
    # CPU workers would not fit either (the head's one CPU): not offered.
    small_head = dataclasses.replace(_cluster({"CPU": 1.0}), address="10.0.0.1:6379")
    assert refusal(small_head).endswith(
        "no GPU up: give --wait-for-nodes S where its autoscaler starts GPU nodes on demand, "
        "or attach to a cluster with GPUs (--address)"), refusal(small_head)
    assert refusal(_cluster({"CPU": 1.0})).endswith(
        "this cluster has no GPU up: attach to a cluster with GPUs (--address)")
    attached = dataclasses.replace(_cluster(ONE_GPU), address="10.0.0.1:6379")
    with pytest.raises(UserError, match=r"--use-gpu no \(CPU workers\), or --wait-for-nodes S"):
        plan.fit_to_cluster(_request(tmp_path, "--workers", "2"), attached)
    with pytest.raises(UserError) as refused:
        plan.fit_to_cluster(_request(tmp_path, "--workers", "2"), _cluster(ONE_GPU))
    assert "--wait-for-nodes" not in str(refused.value)


def test_a_share_of_a_gpu_is_counted_on_one_gpu_as_ray_gives_it(tmp_path):
    """A review (2026-12-01): 13 workers at 0.6 of a GPU on a node of 8 were planned
    (8 / 0.6 = 13.3), but Ray takes each share from a single GPU, so their placement
    group was never ready and the trial waited for ever (checked on a
    ray.cluster_utils cluster that declares 8 GPUs). And the share a refusal named
    was rounded up (1/6 printed 0.167, which fits 5 a GPU): the user who took it was
    refused again."""
    node = {"CPU": 64.0, "GPU": 8.0}
    with pytest.raises(UserError, match="can hold at most 8 such workers; to put 13 workers "
                                        "on 8 GPUs give --gpus-per-worker 0.5 "):
        plan.fit_to_cluster(_request(tmp_path, "--workers", "13", "--gpus-per-worker", "0.6"),
                            _cluster(node))
    with pytest.raises(UserError, match="at most 24 such workers; to put 26 workers on 8 GPUs "
                                        "give --gpus-per-worker 0.25 "):
        plan.fit_to_cluster(_request(tmp_path, "--workers", "26", "--gpus-per-worker", "0.3"),
                            _cluster(node))
    # A preset's point left out says so in GPUs, one a worker at 0.6.
    assert plan.shortfall(_cluster(node), 13, {"CPU": 1.0, "GPU": 0.6}) == (
        "13 workers need 13 GPUs; this cluster has 8: not run")
    # On two such nodes 13 fit: 8 on one, 5 on the other.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "13", "--gpus-per-worker",
                                          "0.6"), _cluster(node, node))
    assert fitted.sweep.workers == (13,)
    with pytest.raises(UserError, match="to put 48 workers on 8 GPUs give --gpus-per-worker "
                                        "0.166 "):
        plan.fit_to_cluster(_request(tmp_path, "--workers", "48"), _cluster(node))
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "48", "--gpus-per-worker",
                                          "0.166"), _cluster(node))
    assert fitted.sweep.base.workers_per_gpu == 6
    # Every share a refusal can name fits as many workers a GPU as it was named for.
    for per_gpu in range(1, 101):
        config = TrainConfig(use_gpu=True, gpus_per_worker=placement.gpu_share(per_gpu))
        assert config.workers_per_gpu == per_gpu, (per_gpu, config.gpus_per_worker)
        assert placement.node_capacity({**node, "CPU": 1000.0},
                                       config.resources_per_worker) == 8 * per_gpu


def test_where_the_gpu_nodes_cpus_are_short_the_line_says_so(tmp_path):
    """A CPU-only head and two nodes of 8 GPUs and 4 CPUs: 16 GPUs and 12 CPUs, room
    for 8 workers. The 16-worker points left out had read "need 16 GPUs; this
    cluster has 16, room for 8" (GPUs, which are not short), and the refusal named
    the head's CPUs as if they could hold a GPU worker."""
    nodes = _cluster({"CPU": 4.0}, CPU_STARVED, CPU_STARVED)
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "scaling", "--quick"), nodes)
    assert fitted.sweep.workers == (1, 2, 4, 8)
    assert {cell.reason for cell in fitted.left_out} == {
        "16 workers need 1 GPU and 1 CPU each on one node; this cluster's nodes hold 8 such "
        "workers: not run"}
    with pytest.raises(UserError, match=r"16 workers need 16 CPUs \(1 each\), this cluster has "
                                        r"12, 8 of them on the GPU nodes: give fewer --workers"):
        plan.fit_to_cluster(_request(tmp_path, "--workers", "16"), nodes)


def test_no_more_trials_at_once_than_the_cluster_holds(tmp_path, capsys):
    """--max-concurrent-trials 2 on a node of 8 GPUs with 8-worker trials: one fits at
    a time, and the plan had said two ran side by side, sharing the node."""
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "8", "--batch-size", "256,512",
                                          "--max-concurrent-trials", "2"),
                                 _cluster(NODE_OF_EIGHT))
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.held_back) == (1, False, 2)
    plan_text.print_plan(fitted)
    assert ("timing: each trial timed with its nodes to itself: the cluster holds 1 trial of 8 "
            "workers at once, not the 2 that --max-concurrent-trials asked for"
            ) in capsys.readouterr().out.splitlines()
    # Trials of fewer workers still run side by side where they fit.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "4", "--batch-size", "256,512",
                                          "--max-concurrent-trials", "2"),
                                 _cluster(NODE_OF_EIGHT))
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.held_back) == (
        2, True, None)


def test_one_worker_count_packs_onto_nodes_of_several_gpus(tmp_path):
    """Two nodes of 8 GPUs: one-GPU trials of one worker count (no speedup to
    time) run 16 at once, not one per node; with two counts each trial still
    gets whole nodes of its own."""
    nodes = _cluster(NODE_OF_EIGHT, NODE_OF_EIGHT)
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1", "--lr", "0.1,0.2",
                                          "--repeats", "8"), nodes)
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.placements) == (
        16, True, None)
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "8", "--lr", "0.1,0.2"), nodes)
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (2, False)
    assert fitted.placements is not None  # a whole node each, as many as packing
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1,2"), nodes)
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (2, False)


def test_pinned_workers_never_run_side_by_side(tmp_path, capsys):
    """A review (2026-11-29): --pin-cores picks a worker's cores by its local rank,
    which every trial counts from 0, so trials packed onto one node (8 one-CPU
    trials on a node of 8) pinned every worker to the same cores."""
    argv = ("--workers", "1", "--lr", "0.1,0.2", "--repeats", "4", "--pin-cores")
    fitted = plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(CPU_NODE))
    assert (fitted.max_concurrent_trials, fitted.side_by_side, fitted.pinned) == (1, False, True)
    plan_text.print_plan(fitted)
    assert ("timing: each trial timed with its nodes to itself: --pin-cores pins workers by "
            "their local rank, the same in every trial, so trials run one at a time"
            ) in capsys.readouterr().out.splitlines()
    with pytest.raises(UserError, match="^--pin-cores pins each worker to cores chosen by its "
                                        "local rank, which every trial counts from 0: 3 trials "
                                        "side by side on a node would share them; drop "
                                        "--max-concurrent-trials or --pin-cores$"):
        plan.fit_to_cluster(_request(tmp_path, *argv, "--max-concurrent-trials", "3"),
                            _cluster(CPU_NODE))
    # One trial at a time for another reason: the plan does not blame --pin-cores.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1,2", "--pin-cores"),
                                 _cluster({"CPU": 8.0}))
    assert (fitted.max_concurrent_trials, fitted.pinned) == (1, False)
    plan_text.print_plan(fitted)
    assert "--pin-cores" not in capsys.readouterr().out
    # Trials on whole nodes of their own share no core: as many at once as nodes.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "8", "--lr", "0.1,0.2",
                                          "--pin-cores"), _cluster(CPU_NODE, CPU_NODE))
    assert (fitted.max_concurrent_trials, fitted.side_by_side) == (2, False)


def test_the_plan_says_why_trials_run_one_at_a_time_and_what_ends_them(tmp_path, capsys):
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "time-to-accuracy"),
                                 _cluster({"CPU": 2.0}))
    plan_text.print_plan(fitted)
    lines = capsys.readouterr().out.splitlines()
    assert ("timing: each trial timed with its nodes to itself: trials of several worker counts "
            "compare their times, so they run one at a time (--max-concurrent-trials N runs N "
            "side by side)") in lines
    assert ("every trial: target test accuracy 0.8, the trial ends there (--stop-at-target); "
            "ASHA stops trials that lag (--scheduler asha); evaluated 4 times an epoch") in lines
    # "Up to" no more trials than there are.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--workers", "1", "--max-concurrent-trials",
                                          "100"), _cluster({"CPU": 2.0}))
    plan_text.print_plan(fitted)
    out = capsys.readouterr().out
    assert "1 trial, up to 1 at a time" in out and "every trial:" not in out
    # --no-tf32 with GPU workers from the cluster (auto) is said; with CPU workers, refused.
    request = _request(tmp_path, "--workers", "1", "--no-tf32")
    plan_text.print_plan(plan.fit_to_cluster(request, _cluster(ONE_GPU)))
    assert ("every trial: fp32 convolutions in IEEE fp32, not TensorFloat-32 (--no-tf32)"
            in capsys.readouterr().out.splitlines())
    with pytest.raises(UserError, match=r"^--no-tf32 is for GPU workers: "):
        plan.fit_to_cluster(request, _cluster({"CPU": 2.0}))
    assert "timing: each trial timed with its nodes to itself" in out


def test_every_trial_of_the_exercises_has_a_line_of_its_own(tmp_path, capsys):
    """13.6.3's `bucketed` reference sums over gloo's sockets, as `delayed` does; the
    strategies part's `bucketed` through shared memory: two lines that once read alike."""
    plan_text.print_plan(plan.fit_to_cluster(_request(tmp_path, "--preset", "exercises"),
                                             _cluster({"CPU": 2.0})))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  [")]
    assert len(lines) == len(set(lines)) > 30
    sockets = [line for line in lines if "summed over gloo's sockets" in line]
    assert len(sockets) == 1 and sockets[0].startswith("  [delayed] 2 workers, ")
    assert "sync bucketed" in sockets[0]


def test_a_model_of_the_users_own_is_sized_in_the_plan(tmp_path):
    request = _request(tmp_path, "--model", "own_code:mlp", "--dataset", "own_code:grey_pairs",
                       "--batch-size", "32")
    assert model_check.parameters_text(request.sweep.base) == (
        " (12.9k parameters, 51.7k bytes a replica in fp32)")
    assert [si_text(value) for value in (999_600, 999_499_000, 100, 13_092)] == [
        "1M", "999M", "100", "13.1k"]
    assert model_check.parameters_text(TrainConfig()) == ""  # the book's LeNet: not built here


def test_the_plan_prints_the_memory_floor_of_a_model_it_built(tmp_path, capsys):
    """The line's figures: tests/unit/test_memory_floor.py."""
    request = _request(tmp_path, "--model", "own_code:mlp", "--dataset", "own_code:grey_pairs",
                       "--batch-size", "16,32", "--workers", "1")
    plan_text.print_plan(plan.fit_to_cluster(request, _cluster({"CPU": 2.0, "memory": 8e9})))
    (line,) = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("memory: ")]
    assert " at 32 images a worker, fp32 (weights 51.7kB + activations " in line, line


def test_a_gpu_sweep_of_several_worker_counts_captures_no_step_under_auto(tmp_path, capsys):
    """Several workers' steps run eagerly (graphed.py): a 1-worker step replayed as a
    CUDA graph beside them would read the graph's gain as a loss of scaling, so under
    `--cuda-graph auto` a GPU sweep that times worker counts against each other
    captures none, says so in its plan, and tells its trials why
    (SweepConfig.graph_held_off).
    Where one worker count runs (the main job on one GPU), the 1-worker step is captured."""
    eight = _cluster({"CPU": 64.0, "GPU": 8.0})
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "scaling"), eight)
    held = fitted.sweep.graph_held_off
    assert held == ("auto, in a sweep that times 1, 2, 4 and 8 workers against each other, "
                    "whose several workers' steps run eagerly (--cuda-graph on captures the "
                    "1-worker steps anyway)")
    plan_text.print_plan(fitted)
    assert ("CUDA graphs: none (--cuda-graph auto): several workers' steps run eagerly, so the "
            "1-worker trials' do too, and each speedup sets a step against one of its kind; "
            "--cuda-graph on captures the 1-worker steps anyway"
            ) in capsys.readouterr().out.splitlines()
    one_worker = TrainConfig(use_gpu=True)
    assert graphed.off_reason(one_worker, GPU, held) == f"off: {held}"
    assert graphed.off_reason(one_worker, GPU, None) is None
    # `on` captures the 1-worker steps anyway, and the plan says what the speedups then read.
    fitted = plan.fit_to_cluster(_request(tmp_path, "--preset", "scaling", "--cuda-graph", "on"),
                                 eight)
    assert fitted.sweep.graph_held_off is None
    assert graphed.off_reason(TrainConfig(use_gpu=True, cuda_graph="on"), GPU,
                              fitted.sweep.graph_held_off) is None
    plan_text.print_plan(fitted)
    assert ("CUDA graphs: the 1-worker trials' steps (--cuda-graph on); several workers' run "
            "eagerly, so a speedup here sets a replayed step against launched ones"
            ) in capsys.readouterr().out.splitlines()
    # Nothing held off, and no line, where one worker count runs, where none is 1
    # worker (no step is captured), or on CPUs.
    for argv, nodes in (((), ONE_GPU), (("--workers", "2,4"), {"CPU": 64.0, "GPU": 8.0}),
                        (("--preset", "scaling"), {"CPU": 8.0}),
                        (("--preset", "scaling", "--cuda-graph", "off"),
                         {"CPU": 64.0, "GPU": 8.0})):
        fitted = plan.fit_to_cluster(_request(tmp_path, *argv), _cluster(nodes))
        assert fitted.sweep.graph_held_off is None, argv
        plan_text.print_plan(fitted)
        assert "CUDA graphs" not in capsys.readouterr().out, argv


def test_gpu_workers_are_not_pinned_to_cores(tmp_path):
    """`--pin-cores` is for CPU workers: on GPUs it is refused in one line, for a sweep
    whose GPUs came from the cluster and for train.py's run."""
    message = ("--pin-cores pins CPU workers to cores by local rank; GPU workers' "
               "communication threads (NCCL's, gloo's)")
    with pytest.raises(UserError, match=re.escape(message)):
        plan.fit_to_cluster(_request(tmp_path, "--pin-cores"), _cluster(ONE_GPU))
    with pytest.raises(UserError, match=re.escape(message)):
        plan.fit_run_to_cluster(TrainConfig(pin_cores=True), True, _cluster(ONE_GPU))
    assert plan.fit_to_cluster(_request(tmp_path, "--pin-cores"), _cluster({"CPU": 4.0})
                               ).sweep.base.pin_cores
