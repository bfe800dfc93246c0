"""tools/rewrite_report.py: a recorded sweep's report rewritten with this code from
its own files, its title lines kept; a folder that is no sweep's is one line."""

import shutil
from pathlib import Path

import pandas as pd

from helpers import import_tool

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "exercises-2core"


def test_a_recorded_sweep_is_rewritten_with_its_title_lines_and_its_trials(tmp_path, capsys):
    rewrite = import_tool("rewrite_report")
    # The example's 13.5 pair (1 and 2 workers, scratch, 3 seeds each), its own files.
    folder = tmp_path / "sweep"
    folder.mkdir()
    before = pd.read_csv(EXAMPLE / "trials.csv")
    before = before[(before["part"] == "batch-global")]
    before.to_csv(folder / "trials.csv", index=False)
    for name in ("epochs.csv", "evaluations.csv"):
        rows = pd.read_csv(EXAMPLE / name)
        rows[rows["trial_id"].isin(before["trial_id"])].to_csv(folder / name, index=False)
    shutil.copy(EXAMPLE / "calibration.json", folder)
    shutil.copy(EXAMPLE / "report.md", folder)
    # A profiled sweep's rows (--profile-steps), kept and written into its report again.
    from orchestrator.report import profile
    profiled = pd.DataFrame([{"trial_id": before["trial_id"].iloc[0], "rank": 0,
                              "device": "cpu", "steps": 3, "step_ms": 10.0, "op": "aten::mm",
                              "calls": 2.0, "self_cpu_ms": 4.0, "trace": "t/rank0.json.gz"}],
                            columns=profile.PROFILE_COLUMNS)
    profiled.to_csv(folder / "profile.csv", index=False)
    written = (folder / "profile.csv").read_text()
    title = rewrite.title_lines((EXAMPLE / "report.md").read_text())
    assert title[0].startswith("- date: ") and len(title) >= 5
    assert rewrite.main([str(folder)]) == 0
    assert rewrite.title_lines((folder / "report.md").read_text()) == title
    assert (folder / "answers.md").read_text().startswith("## Answers")
    report = (folder / "report.md").read_text()
    assert "## Profiled steps" in report and "- `profile.csv`" in report
    assert (folder / "profile.csv").read_text() == written
    after = pd.read_csv(folder / "trials.csv")
    assert sorted(after["trial_id"]) == sorted(before["trial_id"]) and len(after) == 6
    assert (after.set_index("trial_id")["final_test_acc"].sort_index().tolist()
            == before.set_index("trial_id")["final_test_acc"].sort_index().tolist())
    assert rewrite.target_acc(["- evaluations per epoch: 1; target test accuracy: 0.8"]) == 0.8
    assert rewrite.target_acc(title) is None


def test_a_folder_that_is_no_sweeps_is_one_line_and_exit_2(tmp_path, capsys):
    rewrite = import_tool("rewrite_report")
    assert rewrite.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines() == [
        f"error: {tmp_path} has no trials.csv, epochs.csv, report.md: not a sweep's folder"]
    assert not list(tmp_path.iterdir())
