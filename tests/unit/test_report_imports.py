"""The report reads a finished sweep's files with pandas alone: none of its
modules imports torch or Ray, so a sweep's folder can be read where neither is."""

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import orchestrator
import orchestrator.report


def test_no_report_module_imports_torch_or_ray():
    # Every module found by walking the package: a new one is covered by itself.
    modules = [module.name for module in pkgutil.walk_packages(orchestrator.report.__path__,
                                                               "orchestrator.report.")]
    assert "orchestrator.report.scaling_model" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted({name.split('.')[0] for name in sys.modules} & {'torch', 'ray'}))")
    # A fresh interpreter, importing this checkout's orchestrator: this one has torch.
    root = Path(orchestrator.__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
