"""`--preset exercises`: the union of small grids the book's exercises need, fitted
to a cluster, `--quick`, and the emulated straggler of 13.6's exercise 2."""

import re
import time
from collections import Counter

import pytest
import torch

from orchestrator.config import cli
from orchestrator.driver import checks, plan
from orchestrator.driver.cluster import Cluster
from orchestrator.errors import UserError
from orchestrator.training.timing import DeviceTimer


def _fitted(tmp_path, *argv: str, nodes=({"CPU": 2.0},)):
    request = checks.sweep_request(cli.sweep_parser("").parse_args(
        ["--preset", "exercises", *argv, "--out", str(tmp_path / "out")]))
    cluster = Cluster(address=None, dashboard_url=None, node_resources=tuple(nodes))
    return plan.fit_to_cluster(request, cluster).sweep


def test_on_two_cores_every_part_is_there_with_its_own_values(tmp_path):
    sweep = _fitted(tmp_path)
    assert sweep.workers == (1, 2) and sweep.baseline_threads == 2
    parts = Counter(point.part for point in sweep.grid)
    # 13.5's experiment with 3 seeds, 4 lrs at 1 worker (its 0.2 is batch-global's
    # run) and 3 at 2 (none below 0.2), 3 seeds on each cell of a linear-rule pair
    # (1 worker at 0.1 and 0.4, 2 workers at 0.2, 0.4 and 0.8; 1 worker's 0.8 has no
    # partner), the warm-up arms at 0.4 and at the largest lr, 0.8, with 3 seeds each,
    # 4 more strategies per count, the delayed arm with 3 seeds, its bucketed twin
    # over gloo and its half-lr arm, the two splits at 2 workers, one 2-thread worker.
    assert parts == {"batch-global": 6, "batch-lr": 16, "warmup": 6, "strategies": 8,
                     "delayed": 5, "split": 2, "threads": 1, "resnet18": 2}
    replicas = Counter((p.train.num_workers, p.train.lr) for p in sweep.grid
                       if p.part == "batch-lr")
    assert replicas == {(1, 0.1): 3, (1, 0.4): 3, (1, 0.8): 1,
                        (2, 0.2): 3, (2, 0.4): 3, (2, 0.8): 3}
    by_part = {}
    for point in sweep.grid:
        by_part.setdefault(point.part, []).append(point)
    assert [(p.train.global_batch_size, p.train.lr) for p in by_part["batch-lr"]
            if p.train.seed == 0] == [
        (256, 0.1), (256, 0.4), (256, 0.8),
        (512, 0.2), (512, 0.4), (512, 0.8)]  # b per worker; the rule is tested
    assert {p.train.sync for p in by_part["strategies"]} == {"bucketed", "ddp", "sharded", "root"}
    assert all(p.train.num_epochs == 2 for p in by_part["strategies"])  # timing only
    # Two steps overlapped: a different optimizer, so every epoch and every seed, at
    # 2 workers beside batch-global's synchronous twin; timed beside bucketed summing
    # over the same transport (the process group's, not the node's shared memory).
    delayed = [(p.train.sync, p.train.num_workers, p.train.num_epochs, p.train.seed,
                p.train.shared_memory, p.train.lr, p.train.global_batch_size)
               for p in by_part["delayed"]]
    # And staleness's price: delayed at half the lr, every epoch, the first seed.
    assert sorted(delayed) == [("bucketed", 2, 2, 0, False, 0.2, 256),
                               ("delayed", 2, 8, 0, True, 0.1, 256),
                               *[("delayed", 2, 8, seed, True, 0.2, 256) for seed in (0, 1, 2)]]
    assert {(p.train.split, p.train.straggler_slowdown) for p in by_part["split"]} == {
        ("even", 2.0), ("proportional", 2.0)}
    assert all(p.train.straggler_slowdown == 1.0 for p in sweep.grid if p.part != "split")
    (threads,) = by_part["threads"]
    assert (threads.train.num_workers, threads.train.threads_per_worker) == (1, 2)
    # The book's own run is the reference of every timing part.
    assert all((p.train.lr, p.train.sync if p.part not in ("strategies", "delayed")
                else "scratch") == (0.2, "scratch")
               for p in sweep.grid
               if p.part in ("batch-global", "strategies", "delayed", "split", "threads")
               and not (p.part == "delayed" and p.train.lr == 0.1))
    # ResNet-18 trained for real on CPUs, briefly: 8 steps of b per worker, 2 epochs,
    # 500 test images; 13.6's lr scaled linearly.
    assert [(p.train.model, p.train.num_workers, p.train.global_batch_size, p.train.lr,
             p.train.train_limit, p.train.num_epochs, p.train.test_limit)
            for p in by_part["resnet18"]] == [("resnet18", 1, 256, 0.1, 2048, 2, 500),
                                              ("resnet18", 2, 512, 0.2, 4096, 2, 500)]
    assert all(p.train.steps_per_epoch == 8 for p in by_part["resnet18"])


def test_on_gpus_resnet18_joins_and_the_threads_baseline_goes(tmp_path):
    sweep = _fitted(tmp_path, "--use-gpu", "auto", nodes=({"CPU": 8.0, "GPU": 2.0},))
    assert sweep.base.use_gpu and sweep.baseline_threads == 0
    resnet = [p.train for p in sweep.grid if p.part == "resnet18"]
    # 13.6's recipe: 256 per GPU, lr 0.1 scaled linearly.
    assert [(t.model, t.num_workers, t.global_batch_size, t.lr) for t in resnet] == [
        ("resnet18", 1, 256, 0.1), ("resnet18", 2, 512, 0.2)]
    assert not any(p.part == "threads" for p in sweep.grid)
    # 13.6.3's bucketed twin is the strategies part's own, its sums going as delayed's
    # do (NCCL; gloo where two workers share a GPU): not run twice, as on CPUs it is
    # beside the strategies' shared memory.
    twins = [p.part for p in sweep.grid if p.train.sync == "bucketed" and
             p.train.num_workers == 2 and p.train.global_batch_size == 256]
    assert twins == ["strategies"]
    assert sorted((p.train.sync, p.train.lr) for p in sweep.grid if p.part == "delayed") == [
        ("delayed", 0.1), ("delayed", 0.2), ("delayed", 0.2), ("delayed", 0.2)]


def test_resnet18_on_cpus_trains_on_no_more_images_than_the_sweep_loads(tmp_path):
    """2 workers' 8 steps of 512 need 4096 images: with --train-limit 3000 that point
    is left out (it would index past the images loaded), 1 worker's 2048 stay; a
    --test-limit below the subset's 500 is the subset."""
    resnet = [p.train for p in _fitted(tmp_path, "--train-limit", "3000", "--test-limit",
                                       "300").grid if p.part == "resnet18"]
    assert [(c.num_workers, c.train_limit, c.test_limit) for c in resnet] == [(1, 2048, 300)]


def test_one_worker_count_has_no_split_part(tmp_path):
    sweep = _fitted(tmp_path, nodes=({"CPU": 1.0},))
    assert sweep.workers == (1,)
    assert not any(p.part in ("split", "threads") for p in sweep.grid)


def test_quick_reduces_the_data_epochs_and_batch_and_options_still_win(tmp_path):
    base = _fitted(tmp_path, "--quick").base
    assert (base.train_limit, base.test_limit, base.num_epochs) == (12000, 2000, 3)
    assert {p.batch_size for p in _fitted(tmp_path, "--quick").grid} == {64}
    assert _fitted(tmp_path, "--quick", "--epochs", "4").base.num_epochs == 4


def test_quick_beside_a_config_file_is_refused(tmp_path):
    config = tmp_path / "sweep.json"
    config.write_text('{"workers": [1]}')
    with pytest.raises(UserError, match="--quick"):
        checks.sweep_request(cli.sweep_parser("").parse_args(
            ["--config", str(config), "--quick", "--out", str(tmp_path / "out")]))


@pytest.mark.parametrize("args, fragment", [
    (["--batch-size", "64,128"], "one value of its batch sizes, got [64, 128]"),
    (["--momentum", "0,0.9"], "one value of its momentums, got [0.0, 0.9]"),
    (["--precision", "fp32,bf16"], "one value of its precisions, got ['fp32', 'bf16']"),
    (["--batch-scaling", "per-worker"], "sets each part's batch scaling itself, got per-worker"),
])
def test_an_axis_the_study_would_drop_is_refused(tmp_path, args, fragment):
    with pytest.raises(UserError, match=re.escape(fragment)):
        _fitted(tmp_path, *args)


def test_one_value_of_an_axis_is_taken(tmp_path):
    sweep = _fitted(tmp_path, "--momentum", "0.9", "--precision", "bf16")
    assert {(p.train.momentum, p.train.precision) for p in sweep.grid} == {(0.9, "bf16")}


@pytest.mark.parametrize("value", ["0.5", "nan"])
def test_a_straggler_slowdown_below_1_is_refused(tmp_path, value):
    with pytest.raises(UserError, match="straggler slowdown"):
        _fitted(tmp_path, "--straggler-slowdown", value)


def test_a_slowed_timer_stretches_each_span_and_counts_the_stretch():
    timer = DeviceTimer(torch.device("cpu"), slowdown=3.0)
    started_wall, started_cpu = time.perf_counter(), time.thread_time()
    started = timer.start()
    time.sleep(0.02)
    timer.stop(started)
    wall_s = time.perf_counter() - started_wall
    assert timer.seconds == pytest.approx(wall_s, rel=0.1)  # the stretch counts as compute
    assert 0.058 <= timer.seconds < 0.2  # 3x the 20 ms span
    # Busy, as a slower CPU computes: the 40 ms stretch held the core (a share of it on a
    # loaded machine; a sleep would take microseconds of CPU).
    assert time.thread_time() - started_cpu >= 0.01


def test_on_a_node_of_eight_gpus_the_warmup_arm_has_its_twin_without_warmup(tmp_path):
    """At 8 workers the linear rule's lr, 8 x 0.2 = 1.6, lies past the axis (up to
    0.8): batch-lr runs it there too, every seed, so that the warm-up trial at 1.6
    stands beside the same lr and batch without warm-up (13.5.2)."""
    sweep = _fitted(tmp_path, nodes=({"CPU": 16.0, "GPU": 8.0},))
    assert sweep.workers == (1, 2, 4, 8)
    warmup = {(p.train.num_workers, p.train.global_batch_size, p.train.lr)
              for p in sweep.grid if p.part == "warmup"}
    assert warmup == {(8, 2048, 1.6)}  # 0.8 is no larger lr than the rule's: one arm
    twins = Counter((p.train.num_workers, p.train.lr) for p in sweep.grid
                    if p.part == "batch-lr" and p.train.num_workers == 8)
    assert twins == {(8, 0.2): 1, (8, 0.4): 1, (8, 0.8): 3, (8, 1.6): 3}
    # Below 8 workers the axis is as given.
    assert not any(p.train.lr > 0.8 for p in sweep.grid
                   if p.part == "batch-lr" and p.train.num_workers < 8)
