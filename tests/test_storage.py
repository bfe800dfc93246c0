"""Storage locations: paths and URIs joined as Ray and pyarrow read them."""

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
