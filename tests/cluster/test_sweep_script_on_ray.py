"""experiments/sweep.py as a user runs it: embedded Ray, an attached two-node
cluster, a grid point no cluster can hold. (tests/unit/test_sweep_script.py:
bad input.)"""

import json
import math
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
import pytest

from helpers import (DASHBOARD_AGENT_PORT, RAY_CLI, SMALL, hang_limit, ray_node, run_script,
                     wait_for_head)
from orchestrator.driver.cluster import DEFAULT_DASHBOARD_PORT, free_local_port
from orchestrator.driver.jobs import DRY_RUN_LINE
from orchestrator.report.plots import PLOT_FILES



def _assert_complete_results(out_dir, num_trials: int, stdout: str) -> pd.DataFrame:
    for name in ("trials.csv", "epochs.csv", "report.md", "sweep.json", *PLOT_FILES):
        assert (out_dir / name).stat().st_size > 0, name
    trials = pd.read_csv(out_dir / "trials.csv")
    assert len(trials) == num_trials and trials["trial_id"].is_unique
    assert (trials["status"] == "finished").all(), trials[["trial_id", "status", "error"]]
    one_worker = trials[trials["num_workers"] == 1]
    assert len(one_worker) and (one_worker["speedup"] == 1.0).all()
    assert trials["speedup"].notna().all()
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert len(epochs) == num_trials * trials["num_epochs"].iloc[0]
    # The book's model's floor, counted on the driver; a peak only where a GPU measured one.
    assert (trials["memory_floor_mb"] > 0).all() and epochs["peak_memory_mb"].isna().all()
    report = (out_dir / "report.md").read_text()
    assert len(re.findall(r"test acc: \d\.\d\d, [\d.]+ sec/epoch on \d workers?", report)) == num_trials
    assert "## Scaling" in report and "## Learning rate per (workers, batch)" in report
    assert str(out_dir / "report.md") in stdout
    return trials


def test_small_sweep_on_an_embedded_ray(tmp_path):
    # Folders whose last names hold a backslash, a zero and an x, as a new user
    # can type them: legal POSIX names that no URI allows (a file:// URI of
    # them is refused, tests/unit/test_storage.py); as paths they work end to
    # end, calibration included, and a storage's missing parents are made.
    out_dir = tmp_path / "out\\0x"
    store = tmp_path / "no" / "such" / "parent" / "\\0x"
    run = run_script("sweep.py", "--workers", "1,2", "--lr", "0.1,0.2", *SMALL,
                     "--out", str(out_dir), "--storage", str(store))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "calibrating" in run.stdout and (out_dir / "calibration.json").is_file()
    assert "Ray dashboard: http://127.0.0.1:" in run.stdout
    trials = _assert_complete_results(out_dir, 4, run.stdout)
    # The sweep's own Train runs, in a folder named after it (see test_rundir).
    runs = (store / "train-runs").glob(f"{out_dir.name}-*/*/checkpoint_*/history.json")
    assert len(list(runs)) == 4
    assert not (out_dir / "ray").exists()
    assert sorted(trials["base_lr"].unique()) == [0.1, 0.2]
    assert len(re.findall(r"trial \S+ done: test acc", run.stdout + run.stderr)) == 4
    # Tune's progress table: the swept values and the epoch's metrics as columns.
    columns = ["workers", "global batch", "lr", "momentum", "sync", "split", "precision", "seed",
               "epoch",
               "test acc", "s/epoch"]
    assert re.search(r"\|\s+" + r"\s+\|\s+".join(map(re.escape, columns)) + r"\s+\|",
                     run.stdout + run.stderr), run.stdout[-3000:]


@pytest.mark.reliability(
    fault="ASHA stops trials early while later trials wait to run (one at a time)",
    lost="the stopped trials' remaining epochs, by design; the sweep goes on and finishes")
def test_a_sweep_to_a_target_stops_trials_there_and_ranks_them(tmp_path):
    out_dir = tmp_path / "out"
    # Momentum 0.9 at lr 0.05 passes test accuracy 0.6 after about 250 steps
    # (0.59 after 224, 0.69 after 256), an epoch of these 16,384 images; at lrs
    # 0.0005 and 0.001 it stays at chance (0.10), and ASHA stops them at its
    # first rung (epoch 1), where the first trial, ended at the target, set the
    # bar. The third trial used to wait forever for a process held by the
    # stopped second one.
    run = run_script("sweep.py", "--workers", "1", "--batch-size", "64",
                     "--lr", "0.05,0.0005,0.001", "--momentum", "0.9", "--epochs", "3", "--train-limit", "16384",
                     "--test-limit", "500", "--target-acc", "0.6", "--evals-per-epoch", "4",
                     "--stop-at-target", "--scheduler", "asha", "--max-concurrent-trials", "1",
                     "--out", str(out_dir), timeout_s=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_csv(out_dir / "trials.csv").set_index("lr")
    assert (trials["momentum"] == 0.9).all()
    fast = trials.loc[0.05]
    assert fast["status"] == "reached target", trials[["status", "error"]]
    assert 0 < fast["epochs_to_target"] < 3 and fast["epochs_run"] < 3
    assert 0 < fast["train_s_to_target"] < fast["wall_s_to_target"]
    for lr in (0.0005, 0.001):
        slow = trials.loc[lr]
        assert slow["status"] == "stopped early" and slow["epochs_run"] == 1, trials
        assert math.isnan(slow["train_s_to_target"])
    evaluations = pd.read_csv(out_dir / "evaluations.csv")
    fast_evaluations = evaluations[evaluations["trial_id"] == fast["trial_id"]]
    # Its workers ended it at the first evaluation at the target, not a report later
    # at Tune's word; its best accuracy is that evaluation's.
    accuracies = list(fast_evaluations.sort_values("epoch")["test_acc"])
    assert accuracies[-1] >= 0.6 and max(accuracies[:-1]) < 0.6, accuracies
    assert fast["best_test_acc"] >= 0.6
    assert (pd.read_csv(out_dir / "epochs.csv")["momentum"] == 0.9).all()
    report = (out_dir / "report.md").read_text()
    assert "## Time to accuracy" in report
    assert re.search(r"\*\*Recommended:\*\* 1 worker, batch 64, lr 0.05 \(momentum 0.9\) "
                     r"reached 0.6 in [\d.]+ s of training; the book's recipe", report), report
    assert (out_dir / "test_acc_vs_time.png").stat().st_size > 0
    assert re.search(r"trial \S+ done: .*reached test acc 0.6 after", run.stdout + run.stderr)


def _ray_list(what: str, condition: str, dashboard_port: int, env: dict) -> list[dict]:
    """`ray list WHAT --filter CONDITION` through the State API; [] while it
    does not answer, and when nothing matches (it then prints a sentence, not
    JSON: "No resource in the cluster")."""
    listing = subprocess.run(
        [RAY_CLI, "list", what, "--address", f"http://127.0.0.1:{dashboard_port}",
         "--filter", condition, "--format", "json"], env=env, capture_output=True, text=True)
    try:
        return json.loads(listing.stdout) if listing.returncode == 0 else []
    except json.JSONDecodeError:
        return []


def test_sweep_attached_to_a_running_two_node_cluster(tmp_path):
    """Two Ray nodes of one CPU each, as `ray start` makes a cluster: the
    2-worker trial spans both, its second worker reading the data set from
    the other node's object store."""
    # Below the ephemeral range, where Ray's own processes take theirs.
    port = free_local_port(preferred=6379)
    dashboard_port = free_local_port(preferred=DEFAULT_DASHBOARD_PORT)
    env = {**os.environ}
    env.pop("RAY_ADDRESS", None)
    # Ray sends its auth token to an address it was given only when told to.
    env["RAY_AUTH_MODE"] = "token"
    head_args = ["--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=true",
                 "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
                 f"--dashboard-agent-listen-port={free_local_port(preferred=DASHBOARD_AGENT_PORT)}"]
    try:
        with ray_node(*head_args, env=env) as head:
            wait_for_head(head, port)
            agent_port = free_local_port(preferred=DASHBOARD_AGENT_PORT)
            with ray_node(f"--address=127.0.0.1:{port}", "--num-cpus=1",
                          f"--dashboard-agent-listen-port={agent_port}", env=env) as worker_node:
                deadline = time.monotonic() + hang_limit(60)
                while len(_ray_list("nodes", "state=ALIVE", dashboard_port, env)) < 2:
                    assert worker_node.poll() is None and time.monotonic() < deadline, \
                        "the second node did not join"
                    time.sleep(1)
                out_dir = tmp_path / "out"
                run = run_script("sweep.py", "--address", f"127.0.0.1:{port}", "--workers", "1,2",
                                 "--lr", "0.2", *SMALL, "--out", str(out_dir), env=env)
                assert run.returncode == 0, run.stderr[-3000:]
                assert f"Ray cluster at 127.0.0.1:{port}: 2 nodes, 2 CPUs" in run.stdout
                _assert_complete_results(out_dir, 2, run.stdout)
                workers = _ray_list("actors", "class_name=RayTrainWorker", dashboard_port, env)
                # 1 + 2 for the trials, 2 for the calibration before them (one per node).
                assert len(workers) == 5 and len({w["node_id"] for w in workers}) == 2
                # A cluster we did not start may autoscale: the fits asked Ray's
                # autoscaling coordinator for their workers, as Ray Train does.
                assert len(_ray_list("actors", "class_name=_AutoscalingCoordinatorActor",
                                     dashboard_port, env)) == 1
    finally:
        # `ray start` wrote this head's address where Ray looks for "the"
        # cluster of this machine; a head stopped by its handle leaves it.
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def test_a_dry_run_prints_the_plan_fitted_to_the_cluster_and_writes_nothing(tmp_path):
    out_dir, store = tmp_path / "out", tmp_path / "store"
    run = run_script("sweep.py", "--preset", "exercises", "--quick", "--dry-run",
                     "--out", str(out_dir), "--storage", str(store), timeout_s=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # The preset's worker counts, 1 and 2, come from this 2-CPU embedded Ray.
    assert re.search(r"^\d+ trials?, up to 1 at a time, workers on CPUs \(gloo\):$",
                     run.stdout, re.MULTILINE)
    assert "[batch-global] 2 workers, global batch 64 (32/worker)" in run.stdout
    # Goyal et al.'s warm-up, from 1 worker's lr: the plan says where it starts.
    assert re.search(r"\[warmup\] 2 workers, global batch 128 \(64/worker\), lr 0\.4, .*, "
                     r"lr warmed up over 1 epoch from 0\.2$", run.stdout, re.MULTILINE)
    assert f"results: {out_dir}; storage: {store}" in run.stdout
    assert run.stdout.strip().endswith(DRY_RUN_LINE)
    assert "calibrating" not in run.stdout  # nor a trial ended ("trial <id> done: ...")
    assert not re.search(r"^trial \S+ done:", run.stdout, re.MULTILINE), run.stdout[-2000:]
    assert ("timing: each trial timed with its nodes to itself: trials of several worker "
            "counts compare their times, so they run one at a time") in run.stdout
    assert not out_dir.exists() and not store.exists()

    run = run_script("train.py", "--workers", "2", "--accumulation-steps", "4", "--dry-run",
                     "--storage", str(store), timeout_s=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "lenet, 2 workers on CPUs (gloo), sync scratch" in run.stdout
    assert (", each worker's shard in 4 micro-batches, summed once a step "
            "(--accumulation-steps)") in run.stdout
    assert run.stdout.strip().endswith(DRY_RUN_LINE) and "epoch 1/" not in run.stdout
    assert not store.exists()


@pytest.mark.reliability(fault="sweep.py: a grid point the cluster can never hold", lost="nothing")
def test_a_grid_point_that_cannot_fit_fails_fast_with_the_resources(tmp_path):
    started = time.monotonic()
    run = run_script("sweep.py", "--workers", "1,64", "--out", str(tmp_path / "out"), timeout_s=120)
    assert run.returncode == 2, run.stderr
    assert re.search(r"the grid point with 64 workers needs 64 workers of \{1 CPU\} each, but the "
                     r"embedded local Ray: 1 node, \d+ CPUs?, 0 GPUs can hold at most \d+",
                     run.stderr), run.stderr
    assert time.monotonic() - started < hang_limit(60)
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability(fault="sweep.py: a batch whose step no node's memory can hold",
                         lost="nothing")
def test_a_step_too_big_for_any_node_s_memory_is_refused_before_it_starts(tmp_path):
    """A model of one's own whose first layer keeps 3.2 MB an image for backward
    (tests/unit/own_code.py:upsampled): at 60000 images a worker its step holds at
    least 193 GB, more than this machine's memory as the embedded Ray counts it.
    Refused in one line once Ray knows the node, before a trial or a file; the
    floor's figures and the pigeonholes: tests/unit/test_memory_floor.py."""
    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > 150e9:
        pytest.skip("this machine's memory could hold the step: it would train")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).parents[1] / "unit"), os.environ.get("PYTHONPATH")]))}
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", "--model", "own_code:upsampled", "--workers", "1",
                     "--batch-size", "64,60000", "--out", str(out_dir), "--storage",
                     str(tmp_path / "store"), env=env, timeout_s=120)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: 1 worker at global batch 60000, fp32: a worker's step at "
                           "60000 images holds at least 193GB (weights 35.5kB + activations "
                           "193GB), more than a node of "), line
    assert line.endswith("(the memory Ray counts there) holds; a smaller --batch-size, or fewer "
                         "workers on a node, needs less; so does --accumulation-steps N, the "
                         "same step in N micro-batches"), line
    assert not out_dir.exists() and not (tmp_path / "store").exists()


def test_a_roomy_node_with_one_gpu_plans_what_it_can_hold(tmp_path):
    """A real head that declares 4 CPUs and one GPU (`ray start --num-gpus 1`; nothing
    here trains on it: the runs are --dry-runs, the plan fitted to this cluster, but
    for the last two, refused before they start).

    - CPU workers: it could hold the 1- and the 2-worker trial at once; timed side
      by side they would crowd each other's speedup, so they run one at a time.
    - The README's main command (d2l-13.5: 1 and 2 workers, GPUs since the cluster
      has one) plans the 1-GPU trial and names the 2-worker one as not run: exit 0.
    - `--workers 1,2 --gpus-per-worker 0.5` plans both, no step as a CUDA graph.
    - `--workers 2`, the user's own, is refused in one line naming the ways out.
    - Run for real (no --dry-run), sweep.py and train.py find that torch cannot use
      the GPU the head declares, and say so in one line before anything is written
      (where torch here can use a GPU, that part is skipped: they would train).
    (The rules: tests/unit/test_plan.py; a sweep attached to a cluster and run to
    its report: the two-node test above.)"""
    port = free_local_port(preferred=6379)
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    head_args = ["--head", f"--port={port}", "--num-cpus=4", "--num-gpus=1",
                 "--include-dashboard=false",
                 f"--dashboard-agent-listen-port={free_local_port(preferred=DASHBOARD_AGENT_PORT)}"]
    out_dir = tmp_path / "out"
    attach = ["--address", f"127.0.0.1:{port}", *SMALL, "--dry-run", "--out", str(out_dir)]
    try:
        with ray_node(*head_args, env=env) as head:
            wait_for_head(head, port)
            run = run_script("sweep.py", *attach, "--use-gpu", "no", "--workers", "1,2", env=env)
            assert run.returncode == 0, run.stderr[-3000:]
            assert "1 node, 4 CPUs, 1 GPU" in run.stdout
            assert "2 trials, up to 1 at a time, workers on CPUs (gloo):" in run.stdout
            assert run.stdout.strip().endswith(DRY_RUN_LINE)

            run = run_script("sweep.py", *attach, env=env)
            assert run.returncode == 0, run.stderr[-3000:]
            assert "1 trial, up to 1 at a time, workers on GPUs (NCCL):" in run.stdout
            assert re.search(r"1 point of the preset left out.*\n  2 workers, global "
                             r"batch 64 \(32/worker\), lr 0.2, lenet, sync scratch, fp32: 2 "
                             r"workers need 2 GPUs; this cluster has 1: not run", run.stdout)
            assert "CUDA graphs" not in run.stdout  # one worker count: its step is captured
            assert run.stdout.strip().endswith(DRY_RUN_LINE)

            # Two workers sharing the GPU beside one alone: no step captured (graphed.py).
            run = run_script("sweep.py", *attach, "--workers", "1,2", "--gpus-per-worker", "0.5",
                             env=env)
            assert run.returncode == 0, run.stderr[-3000:]
            assert "2 trials, up to 1 at a time, workers on GPUs, 0.5 of one each" in run.stdout
            assert "CUDA graphs: none (--cuda-graph auto)" in run.stdout

            run = run_script("sweep.py", *attach, "--workers", "2", env=env)
            assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
            (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
            assert "needs 2 workers of {1 CPU, 1 GPU} each" in line
            assert "--gpus-per-worker 0.5" in line and "--use-gpu no" in line
            assert not out_dir.exists()

            # Run for real, the main command and train.py: the GPU this head declares is
            # one torch here cannot use (no CUDA device), as on a node whose driver is
            # older than torch's CUDA: one line naming it, before anything is written.
            not_dry = [arg for arg in attach if arg != "--dry-run"]
            for script, args in () if torch.cuda.is_available() else (("sweep.py", not_dry),
                                 ("train.py", [*not_dry[:2], "--workers", "1", "--epochs", "1",
                                               "--train-limit", "256", "--test-limit", "100"])):
                run = run_script(script, *args, env=env)
                assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
                (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
                assert re.match(r"error: node \S+ has 1 GPU\(s\) for Ray, but torch ", line), line
                assert "cannot use it: " in line and line.endswith("or run with --use-gpu no")
                assert "TORCH_INDEX_URL=" in line
            assert not out_dir.exists()
    finally:
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


@pytest.mark.reliability(
    fault="--preset d2l-13.6 (ResNet-18) under ASHA on a cluster without GPUs, with "
          "--max-hours shorter than its estimate",
    lost="the epoch under way: the sweep stops after its first "
                                    "epoch, saying how long it would take; --resume "
                                    "trains the rest from that epoch's checkpoint")
def test_a_long_sweep_prints_its_estimate_and_max_hours_stops_it(tmp_path):
    """Also the preset's points that do not fit: a worker with every CPU's thread
    leaves no room for the preset's second worker, which the plan and report.md name,
    the report with the scaling model's what-if (its rules: tests/unit/test_plan.py,
    tests/unit/test_left_out_report.py). Under ASHA, whose stopped trials end short
    too: a trial the stop cut short is interrupted, not stopped early (it once
    exited 0, its trial "stopped early", with no --resume hint)."""
    from ray._private.utils import get_num_cpus  # what the embedded Ray will hold
    cpus = get_num_cpus()
    out_dir = tmp_path / "out"
    # 8 epochs, not the preset's 10 (an epoch here is 2 steps): the stop comes after
    # the first of each session, and the epochs a worker finishes while Tune's
    # Ctrl-C reaches it still count.
    run = run_script("sweep.py", "--preset", "d2l-13.6", "--threads-per-worker", str(cpus),
                     "--batch-size", "32", "--train-limit", "64", "--test-limit", "100",
                     "--epochs", "8", "--max-hours", "0.00001", "--scheduler", "asha",
                     "--out", str(out_dir), timeout_s=300)
    assert run.returncode == 130, run.stdout[-3000:] + run.stderr[-3000:]
    not_run = (f"2 workers, global batch 64 (32/worker), lr 0.2, resnet18, sync scratch, "
               f"fp32: 2 workers need {2 * cpus} CPUs; this cluster has {cpus}: not run")
    assert f"  {not_run}\n" in run.stdout
    # One worker count: the what-if's gradient bytes counted by the driver, no worker group.
    assert "calibrating: the gradient bytes, counted here" in run.stdout
    assert json.loads((out_dir / "calibration.json").read_text())["allreduce"] == []
    report = (out_dir / "report.md").read_text()
    assert re.search(re.escape(f"- {not_run}. What-if: ") + r"[\d.]+ s/epoch \(speedup [\d.]+\) "
                     r"over 10 Gb/s Ethernet", report), report
    assert "- **interrupted**: 1 of the sweep's trials did not end" in report
    assert list(pd.read_csv(out_dir / "trials.csv")["status"]) == ["interrupted"]
    assert re.search(r"estimate: about [\d.]+ (s|min|h) left \(7 of 8 epochs to go; "
                     r"measured 1 worker [\d.]+ s/epoch", run.stdout), run.stdout[-3000:]
    stopping = (r"revised estimate: [\d.]+ (s|min|h) elapsed \+ about [\d.]+ (s|min|h) left "
                r"exceeds --max-hours 1e-05 \(0.036 s\): stopping the sweep")
    assert re.search(stopping, run.stdout), run.stdout[-3000:]
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert len(epochs) < 8 and (epochs["model"] == "resnet18").all()

    # A resumed sweep keeps to the --max-hours of its own command: Tune restores the
    # stopper it saved when the sweep stopped, which once let it run to the end.
    stopped = run_script("sweep.py", "--resume", "--out", str(out_dir), "--max-hours",
                         "0.00001", timeout_s=300)
    assert stopped.returncode == 130, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert re.search(stopping, stopped.stdout), stopped.stdout[-3000:]
    before, epochs = len(epochs), pd.read_csv(out_dir / "epochs.csv")
    assert before < len(epochs) < 8  # it trained, and stopped again

    # --resume trains the rest: the stop was Tune's Ctrl-C, which keeps the trial
    # unfinished (its stop-all ended it as finished, and --resume ran nothing).
    again = run_script("sweep.py", "--resume", "--out", str(out_dir), timeout_s=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert list(epochs["epoch"]) == list(range(1, 9))
    assert list(pd.read_csv(out_dir / "trials.csv")["status"]) == ["finished"]
    # Every session's parts, and the trial's split over its worker groups.
    sessions = json.loads((out_dir / "sessions.json").read_text())
    assert len(sessions) == 3 and all(session["trials_s"] > 0 for session in sessions)
    report = (out_dir / "report.md").read_text()
    assert "interrupted" not in report
    assert re.search(r"\| - training \(the epochs' times\) \| [\d.]+ \| \d+% \|", report), report
