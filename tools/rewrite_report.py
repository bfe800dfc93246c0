"""Rewrite a recorded sweep's report with this checkout's code: report.md,
answers.md, the scaling model's files and the plots, from the folder's own
trials.csv, epochs.csv, evaluations.csv and calibration.json, keeping
report.md's title lines (what ran where, and when). Nothing is measured again.

    python tools/rewrite_report.py docs/examples/exercises-2core

For the recorded examples in docs/examples/, after a change to the report or the
answers (a sweep of one's own is rewritten by `sweep.py --resume --out DIR`,
which reads Tune's stored results). Targets, GPU use and data subsets are read
from the title lines the sweep wrote; sessions.json, where the folder has it,
gives "where the time went".
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.report import write_sweep_report  # noqa: E402


def title_lines(report: str) -> list[str]:
    """The `- ` lines between report.md's title and its first section."""
    head = report.split("\n## ", 1)[0]
    return [line for line in head.splitlines() if line.startswith("- ")]


def target_acc(lines: list[str]) -> float | None:
    """The target test accuracy the title lines name (`target test accuracy: 0.8`)."""
    for line in lines:
        if "target test accuracy:" in line:
            value = line.split("target test accuracy:", 1)[1].strip().split()[0].rstrip(",;")
            return None if value == "none" else float(value)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a sweep's --out folder")
    args = parser.parse_args(argv)
    folder = args.folder
    missing = [name for name in ("trials.csv", "epochs.csv", "report.md")
               if not (folder / name).exists()]
    if missing:
        print(f"error: {folder} has no {', '.join(missing)}: not a sweep's folder",
              file=sys.stderr)
        return 2
    lines = title_lines((folder / "report.md").read_text())
    trials = pd.read_csv(folder / "trials.csv")
    epochs = pd.read_csv(folder / "epochs.csv")
    evaluations = (pd.read_csv(folder / "evaluations.csv")
                   if (folder / "evaluations.csv").exists() else
                   epochs[["trial_id", "epoch", "test_acc", "train_s", "wall_s"]].assign(
                       eval_s=epochs["eval_time_s"]))
    # What the driver collects (tune_results.collect), up to its last column: the
    # summary's columns after it are derived again from the epochs.
    collected = trials.loc[:, :"stop_at_target"]
    calibration_file = folder / "calibration.json"
    sessions_file = folder / "sessions.json"
    profile_file = folder / "profile.csv"  # --profile-steps' rows, read back as written
    data_line = next((line for line in lines if line.startswith("- data:")), "")
    report = write_sweep_report(
        folder, collected, epochs, evaluations,
        json.loads(calibration_file.read_text()) if calibration_file.exists() else None,
        title_lines=lines, target_acc=target_acc(lines),
        data_note="subsets" if "(subsets)" in data_line else "",
        use_gpu=bool(epochs["devices"].astype(str).str.contains("cuda").any()),
        sessions=json.loads(sessions_file.read_text()) if sessions_file.exists() else (),
        profiled=pd.read_csv(profile_file) if profile_file.exists() else None)
    print("\n".join(f"  {path}" for path in report.paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
