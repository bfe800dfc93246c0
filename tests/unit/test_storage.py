"""Storage locations: paths and URIs joined as Ray and pyarrow read them."""

import pytest

from helpers import run_script
from orchestrator.driver import storage


def test_names_go_into_the_path_and_a_uri_keeps_its_query_last():
    uri = "s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http"
    assert storage.join(uri, "train-runs", "sweep-1") == (
        "s3://bucket/prefix/train-runs/sweep-1?endpoint_override=127.0.0.1:9000&scheme=http")
    assert storage.join("s3://bucket/", "a") == "s3://bucket/a"
    assert storage.join("/data/ray/", "a", "b") == "/data/ray/a/b"
    # A question mark in a local path is part of the name, not a query.
    assert storage.join("/data/why?", "a") == "/data/why?/a"


def test_a_path_is_made_absolute_and_a_uri_is_kept_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.resolve("ray") == str(tmp_path / "ray")
    uri = "gs://bucket/x?a=1"
    assert storage.resolve(uri) == uri


@pytest.mark.reliability(fault="sweep.py: a local --storage that cannot be created or written "
                               "(a path under a file)", lost="nothing")
def test_an_unwritable_storage_is_one_line_before_ray_starts(tmp_path):
    (tmp_path / "a-file").write_text("mine")
    store = tmp_path / "a-file" / "ray"
    run = run_script("sweep.py", "--workers", "1", "--lr", "0.1", "--epochs", "1",
                     "--out", str(tmp_path / "out"), "--storage", str(store), timeout_s=60)
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"--storage {store} cannot be created or written" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Ray" not in run.stdout  # decided before any Ray started
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "a-file").read_text() == "mine"
