"""Shared fixtures: one Ray instance for the tests that share one, real Fashion-MNIST subsets,
an S3 API on 127.0.0.1; the layers' markers, from the folders; docs/RELIABILITY.md.

The tests live in four folders, one per layer, and the folder is the only
place a test's layer is said: tests/unit starts neither Ray nor several
worker processes (the fast layer, `pytest tests/unit`, or equally
`-m "not cluster and not processes and not gpu"`), tests/processes starts 2 or
3 worker processes without Ray, or commands that start processes of their own
(marker `processes`), tests/cluster starts or
uses Ray (marker `cluster`), tests/gpu needs a CUDA GPU and is skipped without
one (marker `gpu`; CI has none). helpers.py and this file, in tests/, serve all four.
"""

import logging
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray

from helpers import REPO, slowness
from orchestrator.driver import cluster
from orchestrator.training import data


SESSION_RAY = "ray_session"
_session_ray: list = []  # the session's Ray while it runs: its handle, or why it did not start
_last_session_ray_users: set[str] = set()  # each layer's last test that uses it


@pytest.fixture
def ray_session():
    """A real local Ray, started the way the scripts start their embedded one,
    at the first test that asks for it; stopped by its own handle after the
    last such test of its layer (`pytest_runtest_teardown`). Those tests run
    first in their layer (`pytest_collection_modifyitems`): the Ray's idle
    processes took 0.13 of a 2-core machine's CPU, and every other test of
    the session ran beside them."""
    if not _session_ray:
        try:
            _session_ray.append(cluster.connect(None, num_cpus=2))
        except Exception as error:  # the next tests fail on it too, without a start each
            _session_ray.append(error)
    if isinstance(_session_ray[0], Exception):
        raise _session_ray[0]
    return _session_ray[0]


def _stop_session_ray() -> None:
    if _session_ray:
        started = not isinstance(_session_ray.pop(), Exception)
        if started:
            ray.shutdown()


def _drop_a_left_ray_store(session) -> None:
    """Ray's key-value store of this process, left by a test on a GCS of its own
    once no Ray of this process runs: said, and dropped. Left on a GCS gone, it
    made Tune's exit hook wait 60 s and end the run with status 1, every test
    passed (stop 84: tools/netns_cluster.py's cluster_utils nodes)."""
    from ray.experimental import internal_kv
    store = internal_kv.internal_kv_get_gcs_client()
    if store is None or ray.is_initialized():
        return
    session.config.pluginmanager.get_plugin("terminalreporter").write_line(
        f"conftest: a test left Ray's key-value store of this process on the GCS at "
        f"{store.address}, without a Ray connection; dropped before the exit")
    internal_kv._internal_kv_reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        yield  # the test's own fixtures first: they may still use the Ray
    finally:
        if item.nodeid in _last_session_ray_users:
            _stop_session_ray()


def _uses_session_ray(item: pytest.Item) -> bool:
    return SESSION_RAY in getattr(item, "fixturenames", ())


def pytest_collection_finish(session):
    last = {}
    for item in session.items:  # the tests that will run: after -m and -k
        if _uses_session_ray(item):
            last[_layer(item)] = item.nodeid
    _last_session_ray_users.clear()
    _last_session_ray_users.update(last.values())


@dataclass(frozen=True)
class S3Store:
    """An S3 API served on 127.0.0.1 (moto's server) and a bucket in it."""

    endpoint: str
    """host:port"""
    bucket: str
    env: dict[str, str]
    """This process's environment with the server's dummy credentials."""
    client: object
    """A boto3 S3 client of the server."""

    def uri(self, prefix: str) -> str:
        """The URI of `prefix` in the bucket, as a user gives an S3-compatible store."""
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http"

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@pytest.fixture
def s3_store(monkeypatch):
    """moto's S3 server on a free port of 127.0.0.1, with one empty bucket, stopped after."""
    from moto.server import ThreadedMotoServer
    import boto3

    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1"}
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    # One log line per request otherwise, in every failing test's report.
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.WARNING)
    # Port 0: the server binds at once, so no Ray process can take it first.
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"{host}:{port}"
        # moto keeps its buckets in this process, across servers: start empty.
        urllib.request.urlopen(urllib.request.Request(f"http://{endpoint}/moto-api/reset",
                                                      method="POST"), timeout=30).close()
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}")
        client.create_bucket(Bucket="d2l-sweeps")
        yield S3Store(endpoint=endpoint, bucket="d2l-sweeps", env=dict(os.environ),
                      client=client)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fashion_mnist_small() -> data.Images:
    """The first 8,192 training and 1,000 test images of the real data set."""
    return data.load(train_limit=8192, test_limit=1000)


# docs/RELIABILITY.md is generated from the fault and bad-input tests: each one
# carries a `reliability` marker saying what it injects and what may be lost,
# and a full run of the suite writes the table with each test's outcome.
RELIABILITY_DOC = REPO / "docs" / "RELIABILITY.md"
_reliability_rows: dict[str, tuple[str, str, str, str]] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "reliability(fault, lost): a fault or bad input this test injects, and what "
                   "may be lost; listed in docs/RELIABILITY.md")


TESTS = Path(__file__).resolve().parent
CI_STARTED_ENV_VAR = "CI_RUN_STARTED_UNIX_S"  # set by .ci/run
SLOWEST = 5  # tests per layer named in the closing summary, with their seconds
LAYERS = {"unit": None, "processes": pytest.mark.processes, "cluster": pytest.mark.cluster,
          "gpu": pytest.mark.gpu}
NO_GPU = pytest.mark.skip(reason="tests/gpu needs a CUDA GPU; this machine has none that torch "
                                 "can use (bench/gpu_check.py runs the layer on one)")


def _layer(item: pytest.Item) -> str | None:
    """The layer folder under tests/ that holds this test: "" for none, None
    for a test outside tests/ (not ours to judge)."""
    path = Path(item.path).resolve()
    if not path.is_relative_to(TESTS):
        return None
    parts = path.relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else ""


# First, before `-m` deselects by these markers (and as before, the set of
# reliability tests is taken from every collected test, deselected ones included).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        layer = _layer(item)
        if layer is None:
            continue
        if not layer:
            raise pytest.UsageError(f"{item.nodeid}: a test belongs in one of the layer folders "
                                    f"tests/{', tests/'.join(LAYERS)}")
        stated = {mark.name for mark in item.iter_markers()} & {"cluster", "processes", "gpu"}
        if stated:
            raise pytest.UsageError(f"{item.nodeid}: marked {', '.join(sorted(stated))} in its "
                                    f"file; its folder, tests/{layer}, says its layer")
        if LAYERS[layer] is not None:
            item.add_marker(LAYERS[layer])
        if layer == "gpu" and not _cuda_available():
            item.add_marker(NO_GPU)
    _in_running_order(items)
    _scale_timeouts(config, items)
    session.reliability_items = {item.nodeid for item in items
                                 if item.get_closest_marker("reliability")}


def _in_running_order(items) -> None:
    """The fast layer first (its failures show in minutes), then the others in
    their folders' order; in each layer, the files of the tests that use the
    session's Ray first, then the rest, each in its order. A file stays whole
    (its module fixtures set up once).

    Run after tests/processes in one pytest process (no Ray), tests/unit
    once took 261 s against 159-168 s alone: state left in pytest's process,
    not found, that this order keeps from the fast layer (the first full run
    so ordered did not show it beyond the machine's hour-to-hour spread)."""
    users = {item.path for item in items if _uses_session_ray(item)}
    layers = {"unit": 0}
    for item in items:
        layers.setdefault(_layer(item), len(layers))
    items.sort(key=lambda item: (layers[_layer(item)], item.path not in users))


def _cuda_available() -> bool:
    import torch  # helpers imported it already
    return torch.cuda.is_available()


def _scale_timeouts(config, items) -> None:
    """Every test's pytest-timeout limit (its own marker's, else the ini's)
    scaled to this machine (helpers.hang_limit): a hang detector, never a speed
    assertion."""
    factor = slowness()
    given = config.getoption("timeout", None)  # --timeout, which wins over the ini's
    default = given if given is not None else config.getini("timeout")
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0] if marker and marker.args else default or 0)
        if seconds > 0:  # 0: no limit
            item.add_marker(pytest.mark.timeout(seconds * factor), append=False)


def pytest_report_header(config):
    return (f"hang limits: x{slowness():.2f}, this machine's LeNet step against the reference "
            f"machine's (tests/helpers.py)")


def pytest_terminal_summary(terminalreporter):
    """Each layer's seconds (setup, call and teardown of its tests) and its
    `SLOWEST` tests, for CI's log: where a layer's time went, run by run."""
    seconds, counts, per_test = {}, {}, {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, when = getattr(report, "nodeid", ""), getattr(report, "when", None)
            parts = nodeid.split("/")
            if when is None or len(parts) < 3 or parts[0] != "tests" or parts[1] not in LAYERS:
                continue  # a warning's report, or a test outside the layers
            duration = getattr(report, "duration", 0.0)
            seconds[parts[1]] = seconds.get(parts[1], 0.0) + duration
            per_test[nodeid] = per_test.get(nodeid, 0.0) + duration
            if when == "call" or (when == "setup" and report.outcome != "passed"):
                counts[parts[1]] = counts.get(parts[1], 0) + 1
    if seconds:
        terminalreporter.write_sep("-", "time per layer")
        for layer in LAYERS:
            if layer not in seconds:
                continue
            terminalreporter.write_line(f"tests/{layer}: {seconds[layer]:.0f} s "
                                        f"({seconds[layer] / 60:.1f} min), "
                                        f"{counts.get(layer, 0)} tests")
            slowest = sorted(((duration, nodeid) for nodeid, duration in per_test.items()
                              if nodeid.split("/")[1] == layer), reverse=True)[:SLOWEST]
            for duration, nodeid in slowest:
                if duration >= 1:
                    terminalreporter.write_line(f"  {duration:6.1f} s  {nodeid}")
    started = os.environ.get(CI_STARTED_ENV_VAR)
    if started:
        elapsed = time.time() - float(started)
        terminalreporter.write_line(f".ci/run: {elapsed / 60:.1f} min since it started "
                                    f"(./setup.sh included)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    marker = item.get_closest_marker("reliability")
    if marker and (report.when == "call" or report.outcome != "passed"):
        fault = marker.kwargs["fault"]
        if hasattr(item, "callspec"):
            fault = f"{fault}: `{' '.join(map(str, item.callspec.params.get('args', [])))}`" \
                if "args" in item.callspec.params else f"{fault} ({item.callspec.id})"
        _reliability_rows[item.nodeid] = (fault, item.name, report.outcome,
                                          marker.kwargs.get("lost", "nothing"))
    return report


def pytest_sessionfinish(session, exitstatus):
    _stop_session_ray()  # a run stopped before the last test that used it
    _drop_a_left_ray_store(session)
    expected = getattr(session, "reliability_items", set())
    # Only a run that tried every such test, the whole suite, rewrites the table.
    whole_suite = session.config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if not whole_suite or session.config.option.keyword or set(_reliability_rows) != expected:
        return
    lines = ["# Reliability", "",
             "Generated by the test suite (`tests/conftest.py`) from the tests that inject a "
             "fault or bad input; do not edit by hand. Every bad input must end in one line "
             "and exit status 2 with nothing started and nothing overwritten.", "",
             "| fault or bad input | test | outcome | lost |", "| --- | --- | --- | --- |"]
    for nodeid in sorted(_reliability_rows):
        fault, name, outcome, lost = _reliability_rows[nodeid]
        lines.append(f"| {fault} | `{nodeid.split('::')[0]}::{name}` | {outcome} | "
                     f"{lost if outcome == 'passed' else 'see the test failure'} |")
    RELIABILITY_DOC.parent.mkdir(exist_ok=True)
    RELIABILITY_DOC.write_text("\n".join(lines) + "\n")
