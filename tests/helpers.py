"""Helpers the tests share (fixtures and hooks stay in conftest.py)."""

import contextlib
import importlib.util
import multiprocessing
import subprocess
import sys
from pathlib import Path

from ray.util.state import list_actors

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def shared_dict():
    """A dict that the processes a test starts fill in, served by a Manager.

    Spawned, never forked: a Manager forked from a pytest process that had run
    Ray trials left the session's Ray unreachable.
    """
    with multiprocessing.get_context("spawn").Manager() as manager:
        yield manager.dict()


def num_actors(class_name: str, address: str | None = None) -> int:
    """How many actors of this class a Ray (by default the one this process is
    connected to) has had, dead ones included.

    Ray names a class defined in a function by its name or, in some runs, by
    its qualified name (`ImplicitFunc` or `wrap_function.<locals>.ImplicitFunc`).
    """
    return sum(actor["class_name"] == class_name or actor["class_name"].endswith(f".{class_name}")
               for actor in list_actors(address=address, limit=10_000,
                                        raise_on_missing_output=False))


def run_script(script: str, *args: str, timeout_s: float = 600, env=None) -> subprocess.CompletedProcess:
    """Run one of experiments/*.py as a user would, capturing its output."""
    return subprocess.run([sys.executable, str(REPO / "experiments" / script), *args],
                          capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)


def import_tool(name: str):
    """tools/<name>.py as a module (tools/ is no package: its scripts are run by hand)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: its dataclasses look themselves up
        spec.loader.exec_module(module)
    return sys.modules[name]
