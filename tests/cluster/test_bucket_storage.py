"""A sweep whose storage is a bucket of an S3-compatible store (moto's server on
127.0.0.1, named by the URI's query): its Tune state and checkpoints land in
the bucket, and --resume reads them back from there."""

import json

import pandas as pd

from helpers import run_script


SWEEP = ["--workers", "1", "--lr", "0.1,0.2", "--epochs", "2", "--train-limit", "2048",
         "--test-limit", "500", "--batch-size", "64", "--no-calibrate", "--profile-steps", "3"]


def test_a_sweep_keeps_its_state_in_a_bucket_and_resumes_from_it(tmp_path, s3_store):
    out_dir = tmp_path / "out"
    args = [*SWEEP, "--out", str(out_dir), "--storage", s3_store.uri("sweeps")]
    run = run_script("sweep.py", *args, env=s3_store.env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    sweep_id = pd.read_json(out_dir / "sweep.json", typ="series")["id"]
    keys = s3_store.keys("sweeps/")
    state = [key for key in keys if key.startswith(f"sweeps/{sweep_id}/experiment_state")]
    assert state, keys
    trials = pd.read_csv(out_dir / "trials.csv")
    assert len(trials) == 2 and (trials["error"].isna()).all(), trials
    for trial_id in trials["trial_id"]:
        run_prefix = f"sweeps/train-runs/{sweep_id}/{trial_id}/checkpoint_"
        # The newest checkpoint is kept (num_to_keep=1), with both epochs' history.
        (history,) = [key for key in keys
                      if key.startswith(run_prefix) and key.endswith("/history.json")]
        body = s3_store.client.get_object(Bucket=s3_store.bucket, Key=history)["Body"]
        assert [row["epoch"] for row in json.loads(body.read())] == [1, 2]
        # --profile-steps: the worker's trace, moved into its run's folder in the bucket.
        assert f"sweeps/train-runs/{sweep_id}/{trial_id}/profile/rank0.pt.trace.json.gz" in keys
    assert not (out_dir / "ray").exists()  # nothing of Ray's kept locally
    epochs = _rows(out_dir / "epochs.csv")
    assert len(epochs) == 1 + 2 * 2  # the header, and 2 epochs of each trial
    profiled = pd.read_csv(out_dir / "profile.csv")
    assert sorted(profiled["trial_id"].unique()) == sorted(trials["trial_id"])
    assert (profiled["steps"] == 3).all() and (profiled["rank"] == 0).all()
    assert profiled["trace"].str.startswith("s3://").all(), profiled["trace"]
    assert "## Profiled steps" in (out_dir / "report.md").read_text()
    profile_rows = _rows(out_dir / "profile.csv")

    # The bucket is all a resume has: the report's files are rewritten from it.
    (out_dir / "epochs.csv").unlink()
    resumed = run_script("sweep.py", *args, "--resume", env=s3_store.env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # Every row as it was, to the last digit (Tune may list the trials in another order).
    assert _rows(out_dir / "epochs.csv") == epochs
    assert _rows(out_dir / "profile.csv") == profile_rows  # read back from the checkpoints
    after = s3_store.keys("sweeps/")
    # No trial ran again: not one checkpoint more.
    assert [key for key in after if "/checkpoint_" in key] == \
        [key for key in keys if "/checkpoint_" in key]


def _rows(path) -> list[str]:
    return sorted(path.read_text().splitlines())
