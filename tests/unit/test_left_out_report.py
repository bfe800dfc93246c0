"""report.md on a preset's points the cluster could not hold: each named with its
reason and the scaling model's what-if, read from a recorded sweep's own
1-worker trials and calibration (tests/data/exercises-quick-current, 2 CPU cores)."""

import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.records import LeftOut
from orchestrator.report.what_if import WHAT_IF_LINKS, what_if
from orchestrator.report.sweep_report import left_out_section, render_report

RECORDED = Path(__file__).resolve().parents[1] / "data" / "exercises-quick-current"
UNRUN = "examples.own_model:cnn"  # a model the recorded sweep has no trial of
TWO_GPUS = LeftOut(num_workers=2, global_batch_size=64, batch_size_per_worker=32, lr=0.2,
                   model="lenet", sync="scratch", precision="fp32", threads_per_worker=1,
                   part="", reason="2 workers need 2 GPUs; this cluster has 1: not run")


@pytest.fixture(scope="module")
def recorded():
    return (pd.read_csv(RECORDED / "trials.csv"), pd.read_csv(RECORDED / "epochs.csv"),
            json.loads((RECORDED / "calibration.json").read_text()))


def test_a_left_out_point_is_estimated_from_its_one_worker_trial(recorded):
    trials, epochs, calibration = recorded
    cell = TWO_GPUS
    rows = what_if(trials, epochs, calibration, cell, use_gpu=True)
    assert [row["link"] for row in rows] == [link.name for link in WHAT_IF_LINKS[True]]
    baseline = trials[trials["trial_id"] == rows[0]["baseline_trial"]].iloc[0]
    # Its own model, sync, threads and batch; the threads part (2 threads) is not it.
    assert (baseline["num_workers"], baseline["sync"], baseline["threads_per_worker"],
            baseline["global_batch_size"], baseline["lr"]) == (1, "scratch", 1, 64, 0.2)
    for row in rows:  # two devices of their own: faster, never past ideal
        assert 1 < row["speedup"] < 2 and row["epoch_s"] < row["baseline_epoch_s"]
    pcie, nvlink = rows
    assert nvlink["speedup"] > pcie["speedup"]  # the faster link sums sooner
    # At one worker the model is its own baseline: no communication, speedup 1.
    single = what_if(trials, epochs, calibration, dataclasses.replace(cell, num_workers=1), use_gpu=True)
    assert [row["speedup"] for row in single] == pytest.approx([1.0, 1.0])
    # CPU workers are estimated as nodes on Ethernet.
    assert [row["link"] for row in what_if(trials, epochs, calibration, cell, use_gpu=False)] \
        == [link.name for link in WHAT_IF_LINKS[False]]
    # Without a 1-worker trial of its model, or without a calibration: no estimate.
    # (The recorded sweep trained LeNet and ResNet-18, never the example's own model.)
    assert what_if(trials, epochs, calibration, dataclasses.replace(cell, model=UNRUN), True) == []
    assert what_if(trials, epochs, None, cell, True) == []


def test_the_report_names_each_point_left_out_as_a_what_if(recorded):
    trials, epochs, calibration = recorded
    assert left_out_section(trials, epochs, calibration, [], use_gpu=True) == []
    unrun = dataclasses.replace(TWO_GPUS, model=UNRUN)
    lines = left_out_section(trials, epochs, calibration, [TWO_GPUS, unrun],
                             use_gpu=True)
    text = "\n".join(lines)
    assert lines[0] == "## Not run on this cluster" and "a what-if, not a measurement" in text
    (lenet,) = [line for line in lines if line.startswith(f"- {TWO_GPUS.line}. What-if: ")]
    assert re.search(r"[\d.]+ s/epoch \(speedup 1\.\d\d\) over PCIe 3\.0", lenet), lenet
    assert re.search(r"from trial `\w+` \([\d.]+ s/epoch measured on 1 worker\)", lenet)
    assert any(line.startswith("- ") and UNRUN in line and "No estimate" in line
               for line in lines)
    # Recorded on CPUs: no step ran as a CUDA graph, and no line says one did.
    assert "CUDA graph" not in text


def test_a_what_if_from_a_graphed_step_says_so(recorded):
    """On one GPU the 1-worker trial's step is a CUDA graph, several workers' are eager:
    the what-if says which it assumed."""
    trials, epochs, calibration = recorded
    graphed = epochs.assign(step_graph="on")
    (line,) = [line for line in left_out_section(trials, graphed, calibration, [TWO_GPUS],
                                                 use_gpu=True) if line.startswith("- ")]
    assert line.endswith("Its step ran as a CUDA graph, which several workers' steps do not "
                         "yet (training/graphed.py): the what-if assumes they would.")


def test_single_workers_count_their_gradient_bytes_without_a_worker_group(recorded):
    """A sweep of 1-worker trials with points left out (one GPU) gets its calibration
    counted in the driver: the same gradient bytes as the recorded sweep's worker
    group measured, hence the same what-if, and nothing timed."""
    from orchestrator.config.grid import SweepConfig
    from orchestrator.config.options import TrainConfig
    from orchestrator.training import calibration as microbenchmark
    trials, epochs, measured = recorded
    sweep = SweepConfig(base=TrainConfig(model="lenet", global_batch_size=64),
                        workers=(1,), batch_sizes=(64,), lrs=(0.2,))
    counted = microbenchmark.counted_alone(sweep)
    assert counted["allreduce"] == counted["compute"] == [] and counted["num_workers"] == 1
    recorded_lenet = [entry for entry in measured["gradient_bytes"]
                      if (entry["model"], entry["precision"]) == ("lenet", "fp32")]
    assert counted["gradient_bytes"] == recorded_lenet
    assert (what_if(trials, epochs, counted, TWO_GPUS, use_gpu=True)
            == what_if(trials, epochs, measured, TWO_GPUS, use_gpu=True))


def test_speedups_of_a_graphed_step_against_launched_ones_say_so(recorded):
    """`--cuda-graph on` in a GPU sweep of several worker counts: the 1-worker trials
    replay their step, several workers launch theirs, and the Scaling section says
    what their speedups then read. Not where every step ran alike."""
    trials, epochs, _ = recorded
    alone = set(trials.loc[trials["num_workers"] == 1, "trial_id"])
    mixed = epochs.assign(step_graph=[
        "on" if trial_id in alone else "off: several workers (their sums run eagerly)"
        for trial_id in epochs["trial_id"]])
    sentence = ("Here the 1-worker trials' steps were replayed as CUDA graphs and several "
                "workers' were launched kernel by kernel (`step_graph` in epochs.csv): their "
                "speedups set the two kinds of step against each other, and part of what they "
                "read is the graph's gain, not the workers'.")
    scaling = render_report(trials, mixed, title_lines=[]).split("## Scaling")[1]
    assert sentence in scaling.split("## Strategies")[0]
    held = epochs.assign(step_graph="off: auto, in a sweep that times 1 and 2 workers against "
                                    "each other")
    for alike in (epochs, held, mixed[mixed["trial_id"].isin(alone)]):
        assert "replayed as CUDA graphs and several" not in render_report(
            trials[trials["trial_id"].isin(alike["trial_id"])], alike, title_lines=[])
