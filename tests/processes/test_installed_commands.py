"""`d2l-train` and `d2l-sweep` from a built wheel, installed outside the checkout."""

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from helpers import REPO


SUBPACKAGES = ("orchestrator.config", "orchestrator.training", "orchestrator.training.sync",
               "orchestrator.driver", "orchestrator.report", "orchestrator.report.answers")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding only the wheel; torch, Ray and pandas come from this
    interpreter's site-packages through a .pth line (the wheel is --no-deps)."""
    root = tmp_path_factory.mktemp("install")
    # A copy, so the build leaves no build/ or egg-info in the checkout.
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "orchestrator", source / "orchestrator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(root / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (root / "dist").glob("d2l_ray_orchestrator-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site_packages = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip())
    # Appended after the venv's own site-packages, so the wheel's copy wins.
    (site_packages / "parent.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, capture_output=True, timeout=300)
    return venv


def _run(venv: Path, program: str, *args: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    # cwd outside the checkout: nothing can be imported from the source tree.
    return subprocess.run([str(venv / "bin" / program), *args], capture_output=True, text=True,
                          cwd=venv.parent, env=env, timeout=120)


def test_the_wheel_holds_every_subpackage(installed):
    code = ("import importlib, orchestrator\n"
            f"for name in {SUBPACKAGES!r}: importlib.import_module(name)\n"
            "print(orchestrator.__file__)")
    run = _run(installed, "python", "-c", code)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).is_relative_to(installed), run.stdout
    assert not Path(run.stdout.strip()).is_relative_to(REPO)


@pytest.mark.parametrize("command, script, title", [
    ("d2l-train", "train.py", "One data-parallel training run"),
    ("d2l-sweep", "sweep.py", "The scaling sweep: Ray Tune")])
def test_each_command_prints_the_scripts_help(installed, command, script, title):
    run = _run(installed, command, "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"usage: {command} ")
    from_checkout = subprocess.run([sys.executable, str(REPO / "experiments" / script), "--help"],
                                   capture_output=True, text=True, cwd=REPO, timeout=120)
    # The same title and options; only the usage lines wrap at the program's name.
    title_and_options = run.stdout.split("\n\n", 1)[1]
    assert title_and_options.startswith(title)
    assert title_and_options == from_checkout.stdout.split("\n\n", 1)[1]


def test_bad_input_exits_2_with_one_line(installed):
    started = time.monotonic()
    run = _run(installed, "d2l-sweep", "--lr", "-1")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("error: learning rate must be"), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stdout == ""
    assert time.monotonic() - started < 30  # no Ray started, nothing waited on


@pytest.mark.parametrize("main, args", [("train_main", ["--lr", "0"]),
                                        ("sweep_main", ["--workers", "1,two"])])
def test_bad_input_is_rejected_before_torch_and_ray_are_imported(installed, main, args):
    # A usage error leaves through argparse's SystemExit, a UserError as the return value.
    code = (f"import sys; from orchestrator.driver.commands import {main}\n"
            "try:\n"
            f"    status = {main}({args!r})\n"
            "except SystemExit as exit:\n"
            "    status = exit.code\n"
            "print(status, [name for name in ('torch', 'ray', 'pandas')\n"
            "               if name in sys.modules])")
    run = _run(installed, "python", "-c", code)
    assert run.stdout.strip() == "2 []", run.stdout + run.stderr
