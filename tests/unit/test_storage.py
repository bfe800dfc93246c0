"""Storage locations: paths and URIs joined as Ray and pyarrow read them, and
the buckets refused before any trial."""

import socket
import time

import pytest

from helpers import hang_limit, refusal, run_main
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
    run = run_main("sweep.py", "--workers", "1", "--lr", "0.1", "--epochs", "1",
                   "--out", str(tmp_path / "out"), "--storage", str(store))
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"--storage {store} cannot be created or written" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Ray" not in run.stdout  # decided before any Ray started
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.mark.reliability(fault="a bucket URI whose endpoint nothing answers at",
                         lost="nothing")
@pytest.mark.parametrize("script", ["sweep.py", "train.py"])
def test_an_unreachable_bucket_is_one_line_naming_its_endpoint(tmp_path, s3_store, script):
    # A port bound but not listening refuses at once, and no one else can take it.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{closed.getsockname()[1]}"
        uri = f"s3://{s3_store.bucket}/sweeps?endpoint_override={endpoint}&scheme=http"
        out = ["--out", str(tmp_path / "out")] if script == "sweep.py" else []
        started = time.monotonic()
        # In this process: the store's credentials are in its environment (s3_store).
        run = run_main(script, "--workers", "1", "--lr", "0.1", "--epochs", "1", *out,
                       "--storage", uri)
        seconds = time.monotonic() - started
    line = refusal(run, tmp_path / "out")
    assert f"the store at http://{endpoint} cannot be reached" in line, line
    assert seconds < hang_limit(60), seconds  # the probe's timeouts, not the AWS SDK's retries


@pytest.mark.reliability(fault="sweep.py: a bucket URI whose bucket does not exist",
                         lost="nothing")
def test_a_missing_bucket_is_one_line_and_nothing_is_written(tmp_path, s3_store):
    uri = s3_store.uri("sweeps").replace(s3_store.bucket, "no-such-bucket")
    run = run_main("sweep.py", "--workers", "1", "--lr", "0.1", "--epochs", "1",
                   "--out", str(tmp_path / "out"), "--storage", uri)
    line = refusal(run, tmp_path / "out")
    assert f"the bucket 'no-such-bucket' does not exist at http://{s3_store.endpoint}" in line
    assert s3_store.client.list_buckets()["Buckets"][0]["Name"] == s3_store.bucket
    assert s3_store.keys() == []


def test_the_reachability_probe_reads_pyarrows_options_from_the_query(s3_store):
    """The probe passes on a bucket that exists, read only: the query's
    endpoint and scheme reached the filesystem it built."""
    storage.require_reachable(s3_store.uri("a/b"))
    assert s3_store.keys() == []
    assert storage.endpoint(s3_store.uri("a")) == f"http://{s3_store.endpoint}"
    assert storage.endpoint("s3://bucket/a") == "the s3 service"


def test_a_file_uri_is_a_local_folder_not_a_bucket(tmp_path):
    assert storage.local_path(f"file://{tmp_path}/store") == tmp_path / "store"
    # The folder pyarrow (and so Ray) writes to: the URI's escapes decoded.
    assert storage.local_path(f"file://{tmp_path}/a%20store") == tmp_path / "a store"
    assert storage.local_path(str(tmp_path)) == tmp_path
    assert storage.local_path("s3://bucket/prefix?endpoint_override=127.0.0.1:9000") is None


# A legal POSIX name that a new user can type: a backslash, a zero and an x.
BACKSLASHED = "\\0x"


@pytest.mark.reliability(fault="a file:// --storage URI with a backslash in its path, which "
                               "no URI allows (the plain path works: test_sweep_script_on_ray)",
                         lost="nothing")
@pytest.mark.parametrize("script", ["sweep.py", "train.py"])
def test_a_file_uri_pyarrow_cannot_parse_is_one_line_naming_the_plain_path(tmp_path, script):
    folder = tmp_path / "no" / "such" / "parent" / BACKSLASHED
    out = ["--out", str(tmp_path / "out")] if script == "sweep.py" else []
    started = time.monotonic()
    run = run_main(script, "--workers", "1", "--lr", "0.1", "--epochs", "1", *out,
                   "--storage", f"file://{folder}")
    line = refusal(run, tmp_path / "out")
    assert f"--storage file://{folder}: not a storage URI pyarrow can open" in line, line
    assert line.strip().endswith(f"give the folder as a plain path (--storage {folder})"), line
    assert time.monotonic() - started < hang_limit(30)
    assert not (tmp_path / "no").exists()
