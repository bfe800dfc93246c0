"""Code on every node: attached to a cluster, a sweep ships this package with
its job (py_modules), so a node that cannot import it still runs the trials;
without shipping, the same trial fails on that import. The user's own model
and data set modules (`--model`, `--dataset`) travel the same way."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import orchestrator
from helpers import REPO, hang_limit, import_tool, sweep_on

netns_cluster = import_tool("netns_cluster")

pytestmark = [pytest.mark.skipif(
    not netns_cluster.namespaces_available(),
    reason="a node without the package needs a mount namespace (root)")]

PACKAGE_DIR = REPO / "orchestrator"
EXAMPLES_DIR = REPO / "examples"
TINY = ["--workers", "2", "--epochs", "1", "--train-limit", "2048", "--test-limit", "500",
        "--batch-size", "64", "--lr", "0.1", "--no-calibrate", "--max-failures", "0"]


@pytest.fixture(scope="module")
def cluster_without_the_package_on_w2():
    """A head of no CPU and two 1-CPU worker nodes, w2 without the package nor
    the examples: a 2-worker trial puts one worker there."""
    assert orchestrator.__file__ == str(PACKAGE_DIR / "__init__.py")
    with netns_cluster.netns_cluster(
            3, 1, head_cpus=0,
            private_path=os.pathsep.join([*_package_dirs(), str(EXAMPLES_DIR)])) as cluster:
        yield cluster
        pids = cluster.pids()
    assert cluster.leftovers(pids) == ([], [])


def _package_dirs() -> list[str]:
    """Every folder a node's Python could import the package from: the
    checkout's (the driver's folder, on its workers' sys.path) and the
    installed one (an editable install may point at another checkout)."""
    where = "import orchestrator; print(orchestrator.__file__)"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    installed = subprocess.run([sys.executable, "-c", where], capture_output=True, text=True,
                               cwd="/", env=env)
    dirs = {str(PACKAGE_DIR)}
    if installed.returncode == 0:
        dirs.add(str(Path(installed.stdout.strip()).parent))
    return sorted(dirs)


def _sweep(cluster, tmp_path, name: str, **env):
    out_dir = tmp_path / name
    run = sweep_on(cluster, *TINY, "--out", str(out_dir),
                   "--storage", str(tmp_path / f"{name}-storage"), env={**cluster.env(), **env})
    return run, out_dir


def test_a_node_that_cannot_import_the_package_runs_its_worker(
        cluster_without_the_package_on_w2, tmp_path):
    cluster = cluster_without_the_package_on_w2
    imports = [sys.executable, "-c", "import orchestrator.config"]
    hidden = cluster.run_in("w2", imports, cwd=REPO, timeout=hang_limit(60))
    assert hidden.returncode != 0
    assert "No module named 'orchestrator.config'" in hidden.stderr, hidden.stderr
    assert cluster.run_in("w1", imports, cwd=REPO, timeout=hang_limit(60)).returncode == 0

    # The driver's settings of the collectives go to every worker, as torchrun's
    # shell's would (NCCL's is unused on CPUs: it only has to travel).
    run, out_dir = _sweep(cluster, tmp_path, "shipped", NCCL_DEBUG="WARN")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"shipping {PACKAGE_DIR} to every node with the job (py_modules)" in run.stdout
    assert "setting NCCL_DEBUG as here for every worker (env_vars)" in run.stdout
    ids = cluster.node_ids()
    epochs = pd.read_csv(out_dir / "epochs.csv")
    assert len(epochs) == 1
    assert sorted(ast.literal_eval(epochs["worker_nodes"].iloc[0])) == sorted(
        [ids["w1"], ids["w2"]])
    assert (out_dir / "report.md").stat().st_size > 0

    # The same trial with nothing shipped: w2's worker cannot import its loop.
    run, out_dir = _sweep(cluster, tmp_path, "not-shipped", ORCHESTRATOR_SHIP_CODE="0")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "shipping" not in run.stdout
    trials = pd.read_csv(out_dir / "trials.csv")
    assert trials["status"].tolist() == ["failed"], trials
    assert "No module named 'orchestrator" in run.stdout + run.stderr


def test_your_own_model_and_data_travel_with_the_job(cluster_without_the_package_on_w2,
                                                     tmp_path):
    """The sweep of examples/own_model.py attached to the cluster: its module
    ships beside the package, a worker on w2 (which cannot import it) builds
    the model, and the report carries the scaling model and the answers written
    for a model not the book's."""
    cluster = cluster_without_the_package_on_w2
    imports = [sys.executable, "-c", "import examples.own_model"]
    hidden = cluster.run_in("w2", imports, cwd=REPO, timeout=hang_limit(60))
    assert "No module named 'examples.own_model'" in hidden.stderr, hidden.stderr

    out_dir = tmp_path / "own"
    run = sweep_on(cluster, "--model", "examples.own_model:cnn", "--dataset",
                   "examples.own_model:tops", "--workers", "1,2", "--epochs", "2",
                   "--train-limit", "2048", "--test-limit", "500", "--batch-size", "64",
                   "--lr", "0.05", "--max-failures", "0", "--out", str(out_dir),
                   "--storage", str(tmp_path / "own-storage"), env=cluster.env())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"shipping {EXAMPLES_DIR} to every node with the job (py_modules)" in run.stdout
    epochs = pd.read_csv(out_dir / "epochs.csv")
    pair = epochs[epochs["num_workers"] == 2]["worker_nodes"].iloc[0]
    ids = cluster.node_ids()
    assert sorted(ast.literal_eval(pair)) == sorted([ids["w1"], ids["w2"]])
    assert set(epochs["model"]) == {"examples.own_model:cnn"}
    report = (out_dir / "report.md").read_text()
    assert "## Scaling model" in report and "### How many workers are worth it" in report
    assert "### 13.5.1" not in report


BIG_DATA_SET = """
import torch


def load():
    images = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8)
    return (images, torch.arange(64) % 10), (images[:32], torch.arange(32) % 10)
"""


def test_a_package_too_big_to_ship_is_one_line(cluster_without_the_package_on_w2, tmp_path):
    """A review (2026-12-01): a --dataset package that holds its data ships whole, and
    Ray refuses a package from its gRPC message limit on (512 MiB; for this driver 2
    MiB, so that a 3 MB file shows it). The sweep ended in Ray's traceback."""
    cluster = cluster_without_the_package_on_w2
    package = tmp_path / "bigdata"
    package.mkdir()
    (package / "__init__.py").write_text(BIG_DATA_SET)
    (package / "images.bin").write_bytes(os.urandom(3_000_000))
    env = {**cluster.env(), "RAY_max_grpc_message_size": str(2 * 1024 * 1024),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                       os.environ.get("PYTHONPATH")]))}
    run = sweep_on(cluster, "--dataset", "bigdata:load", "--workers", "1", "--batch-size", "16",
                   "--dry-run", env=env)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot ship the job's code to the cluster's nodes: Failed "
                           f"to upload module {package} to the Ray cluster: Package size ("), line
    assert line.endswith("exceeds the maximum size of 2.00MiB; keep large files out of the "
                         "folder of a --model or --dataset package (or list them in its "
                         ".gitignore or .rayignore)"), line
    assert "Traceback" not in run.stderr


@pytest.mark.reliability(fault="a node that holds another version of the package at the "
                               "driver's folder, which Ray puts ahead of the shipped code",
                         lost="nothing: refused before anything runs, naming the node")
def test_a_node_whose_own_copy_would_shadow_the_shipped_code_is_named(
        cluster_without_the_package_on_w2, tmp_path):
    """A review (2026-12-01): Ray puts the driver's current folder ahead of the job's
    py_modules on every worker, so a node holding an older copy of the package at
    that path trained it in silence. w2 is given one, a file of it changed; the
    same copy unchanged is as good as the shipped one."""
    cluster = cluster_without_the_package_on_w2
    copy = tmp_path / "copy"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    placed = [sys.executable, "-c", "import sys, shutil; shutil.copytree(sys.argv[1], "
              "sys.argv[2], dirs_exist_ok=True)", str(copy), str(PACKAGE_DIR)]
    # w2's view of the package's folder is its own (an empty tmpfs), emptied after.
    emptied = ["find", str(PACKAGE_DIR), "-mindepth", "1", "-delete"]
    try:
        assert cluster.run_in("w2", placed, timeout=hang_limit(60)).returncode == 0
        same = sweep_on(cluster, *TINY, "--dry-run", env=cluster.env())
        assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
        with open(copy / "records.py", "a") as records:
            records.write("# another version\n")
        assert cluster.run_in("w2", placed, timeout=hang_limit(60)).returncode == 0
        run = sweep_on(cluster, *TINY, "--dry-run", env=cluster.env())
    finally:
        cluster.run_in("w2", emptied, timeout=hang_limit(60))
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"error: node {cluster.node_ids()['w2']} at {cluster.node('w2').ip} holds another "
        f"version of orchestrator at {PACKAGE_DIR} (1 file differs, records.py first), which "
        f"Ray puts ahead of the code this job ships on that node's workers' path: update that "
        f"copy, or start the driver from a folder that holds none"), line
    assert "trial" not in run.stdout
