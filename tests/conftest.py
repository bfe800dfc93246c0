"""Shared fixtures: one Ray instance per test session, real Fashion-MNIST subsets."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from orchestrator import data

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray, started once and stopped by its own handle.

    With its dashboard: Ray Train's clean-up actor asks the State API, which
    the dashboard serves, for the controller's state.
    """
    context = ray.init(address="local", num_cpus=2, include_dashboard=True,
                       dashboard_host="127.0.0.1", dashboard_port=free_port())
    yield context
    ray.shutdown()


@pytest.fixture(scope="session")
def fashion_mnist_small() -> data.FashionMNIST:
    """The first 8,192 training and 1,000 test images of the real data set."""
    return data.load(train_limit=8192, test_limit=1000)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_script(script: str, *args: str, timeout_s: float = 600, env=None) -> subprocess.CompletedProcess:
    """Run one of experiments/*.py as a user would, capturing its output."""
    return subprocess.run([sys.executable, str(REPO / "experiments" / script), *args],
                          capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
