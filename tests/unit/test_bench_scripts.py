"""Every benchmark script imports: bench/ is run by hand, so a module moved
under it would otherwise surface only when someone next measures."""

import sys

import pytest

from helpers import REPO, import_bench

# common.py is what the scripts share, no script of its own.
SCRIPTS = sorted(path for path in (REPO / "bench").glob("*.py") if path.stem != "common")


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_the_script_imports(script, monkeypatch):
    module = import_bench(script.stem, monkeypatch)  # runs nothing: each has a __main__ guard
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
    sys.modules.pop(f"bench_{script.stem}", None)
