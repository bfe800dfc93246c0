"""The answer sheet regenerated from a recorded sweep: the files of a real
`--preset exercises --quick` run on 2 CPU cores (tests/data/exercises-quick-current,
2 seeds), read back as `--resume` reads them. Every exercise is answered, and
the numbers in the sentences are the tables' and the trials' own."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.report.answers import sheet as answer_sheet
from orchestrator.report.answers.sheet import EXERCISES

RECORDED = Path(__file__).resolve().parents[1] / "data" / "exercises-quick-current"


@pytest.fixture(scope="module")
def recorded():
    trials = pd.read_csv(RECORDED / "trials.csv")
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    calibration = json.loads((RECORDED / "calibration.json").read_text())
    sheet = answer_sheet.build(trials, epochs, calibration, data_note="recorded",
                               use_gpu=False)
    return trials, sheet


def _section(answers: str, number: str) -> str:
    return answers.split(f"### {number}")[1].split("\n### ")[0]


def test_every_exercise_is_answered_in_the_books_order(recorded):
    _, sheet = recorded
    headings = re.findall(r"^### (13\.\d\.\d)", sheet.answers, flags=re.MULTILINE)
    assert headings == [number for number, _, _ in EXERCISES]
    for number in headings:
        assert "This sweep has no usable trials" not in _section(sheet.answers, number), number


def test_the_sentences_carry_the_trials_numbers(recorded):
    trials, sheet = recorded
    by_part = {part: rows.set_index("num_workers") for part, rows in trials.groupby("part")}
    global_batch = by_part["batch-global"]
    seeds = global_batch["seed"].nunique()
    assert seeds >= 2  # the quick preset's replicas
    replicas = f"(mean of {seeds} seeds)"
    evaluating = re.search(rf"Evaluating the test set took ([\d.]+) s on 1 worker "
                           rf"{re.escape(replicas)} and ([\d.]+) s on 2 workers", sheet.answers)
    evals = global_batch.groupby(level=0)["mean_eval_time_s"].mean()
    assert evaluating.groups() == (f"{evals[1]:.2f}", f"{evals[2]:.2f}")
    # Epoch times compare epoch 2 of every trial: the timing parts ran two epochs;
    # a cell is the mean over its seeds.
    epochs = pd.read_csv(RECORDED / "epochs.csv").set_index(["trial_id", "epoch"])
    epoch_2 = {k: pd.Series([epochs.loc[(trial_id, 2), "epoch_time_s"]
                             for trial_id in global_batch.loc[[k], "trial_id"]]).mean()
               for k in (1, 2)}
    assert (f"an epoch took {epoch_2[2]:.1f} s {replicas} against {epoch_2[1]:.1f} s on 1 "
            f"worker (mean of {seeds} seeds," in _section(sheet.answers, "13.5.1"))
    speedup = global_batch.groupby(level=0)["speedup"].mean()
    assert f"speedup {speedup[2]:.2f}." in _section(sheet.answers, "13.5.1")


def test_the_model_validates_every_even_multi_worker_trial(recorded):
    trials, sheet = recorded
    # delayed overlaps its sums with the next step's compute, which the model does
    # not describe, and has no 1-worker baseline in the study: it is not validated.
    validated = trials[(trials["num_workers"] > 1) & (trials["split"] == "even")
                       & (trials["straggler_slowdown"] == 1) & (trials["sync"] != "delayed")]
    assert set(sheet.scaling.validation["trial_id"]) == set(validated["trial_id"])
    worst = sheet.scaling.validation["error"].abs().max()
    assert f"the largest error is {100 * worst:.1f}%" in sheet.model_section


def test_13_6_3_measures_the_delayed_optimizer_beside_its_synchronous_twin(recorded):
    trials, sheet = recorded
    delayed = trials[trials["sync"] == "delayed"]
    assert delayed["seed"].nunique() >= 2 and (delayed["part"] == "delayed").all()
    section = _section(sheet.answers, "13.6.3")
    assert f"its final test accuracy was {delayed['final_test_acc'].mean():.3f}" in section
    assert "delayed took" in section and "bucketed (" in section
