"""The answer sheet regenerated from a recorded sweep: the files of a real
`--preset exercises --quick` run on 2 CPU cores (tests/data/exercises-quick),
read back as `--resume` reads them. Every exercise is answered, and the
numbers in the sentences are the tables' and the trials' own."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.report.answers import sheet as answer_sheet
from orchestrator.report.answers.sheet import EXERCISES

RECORDED = Path(__file__).resolve().parents[1] / "data" / "exercises-quick"


@pytest.fixture(scope="module")
def recorded():
    trials = pd.read_csv(RECORDED / "trials.csv")
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    calibration = json.loads((RECORDED / "calibration.json").read_text())
    sheet = answer_sheet.build(trials, epochs, calibration, data_note="recorded",
                               use_gpu=False, num_test_examples=2000)
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
    evaluating = re.search(r"Evaluating the test set took ([\d.]+) s on 1 worker and ([\d.]+) s "
                           r"on 2 workers", sheet.answers)
    evals = by_part["batch-global"]["mean_eval_time_s"]
    assert evaluating.groups() == (f"{evals[1]:.2f}", f"{evals[2]:.2f}")
    global_batch = by_part["batch-global"]
    assert (f"an epoch took {global_batch.loc[2, 'mean_epoch_time_s']:.1f} s against "
            f"{global_batch.loc[1, 'mean_epoch_time_s']:.1f} s on 1 worker"
            in _section(sheet.answers, "13.5.1"))
    assert f"speedup {global_batch.loc[2, 'speedup']:.2f}." in _section(sheet.answers, "13.5.1")


def test_the_model_validates_every_even_multi_worker_trial(recorded):
    trials, sheet = recorded
    validated = trials[(trials["num_workers"] > 1) & (trials["split"] == "even")
                       & (trials["straggler_slowdown"] == 1)]
    assert set(sheet.scaling.validation["trial_id"]) == set(validated["trial_id"])
    worst = sheet.scaling.validation["error"].abs().max()
    assert f"the largest error is {100 * worst:.1f}%" in sheet.model_section
