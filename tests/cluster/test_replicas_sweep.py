"""`--repeats N` on a real sweep: every point once per seed, the seed in trials.csv,
and the report's tables averaging the replicas (issue 31)."""

import pandas as pd

from helpers import run_script

TINY = ["--workers", "1", "--batch-size", "64", "--epochs", "1", "--train-limit", "2048",
        "--test-limit", "500", "--no-calibrate"]


def test_repeats_run_every_point_once_per_seed(tmp_path):
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", *TINY, "--repeats", "2", "--out", str(out_dir), timeout_s=300)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = pd.read_csv(out_dir / "trials.csv")
    assert sorted(trials["seed"]) == [0, 1] and (trials["status"] == "finished").all()
    report = (out_dir / "report.md").read_text()
    assert "Each row is the mean over its `trials`" in report
    assert "Each number says how many seeds (replicas) it is the mean of" in report
