"""`package.module:function`: the user's model or data set, named on the command line.

Imported as the driver or a worker finds it: the current folder first, as
`python -m` and uvicorn do; a worker of an attached cluster gets the module
from the job's runtime environment (driver/job_env.py). No torch here: a
reference to a data set function need not import it.
"""

import ast
import importlib
import os
import re
import sys
from pathlib import Path

from orchestrator.errors import UserError

# As setuptools' entry points and uvicorn write it; the function may be an
# attribute path (`module:Class.method`).
REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def resolve(reference: str, *, option: str):
    """The callable `reference` names; one line (UserError) naming `option` when
    it does not import, is missing, or is not callable."""
    module_name, _, attribute = reference.partition(":")
    found = import_module(module_name, reference, option=option)
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise UserError(f"{option} {reference}: {module_name} has no {attribute}")
        found = getattr(found, part)
    if not callable(found):
        raise UserError(f"{option} {reference}: {attribute} is {type(found).__name__}, not a "
                        f"function")
    return found


def import_module(module_name: str, reference: str, *, option: str):
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(f"{option} {reference}: cannot import {module_name} ({error}); run "
                        f"from the folder that holds it, or put it on PYTHONPATH") from None
    except Exception as error:  # the user's module failed while importing
        raise UserError(f"{option} {reference}: importing {module_name} raised "
                        f"{type(error).__name__}: {error}") from None


def code_to_ship(reference: str) -> Path | None:
    """The folder or file that holds `reference`'s top-level package or module, for
    a cluster's other nodes (Ray's py_modules); None for one installed in
    site-packages, which every node is expected to have as it has torch."""
    top = reference.partition(":")[0].split(".")[0]
    module = import_module(top, reference, option="the reference")
    if getattr(module, "__file__", None):
        path = Path(module.__file__).resolve()
        shipped = path.parent if path.name == "__init__.py" else path
    else:  # a namespace package: its folder, when it has one
        folders = list(getattr(module, "__path__", []))
        if len(folders) != 1:
            return None
        shipped = Path(folders[0]).resolve()
    if "site-packages" in shipped.parts or "dist-packages" in shipped.parts:
        return None
    return shipped


def imported_beside(shipped: Path) -> tuple[Path, ...]:
    """The top-level modules and packages beside `shipped` (in its folder) that its
    code imports, and those theirs import, read from the source (`mynet.py` with
    `from layers import Block` needs `layers.py`): the driver finds them in the
    current folder, a node that lacks it would not. This package is shipped
    apart; names with no file beside `shipped` are installed ones."""
    root, found, queue = shipped.parent, [], [shipped]
    while queue:
        path = queue.pop()
        sources = [path] if path.is_file() else [
            source for source in path.rglob("*.py") if "__pycache__" not in source.parts]
        for source in sources:
            for name in sorted(_top_level_imports(source)):
                found_here = _find(str(root), name)
                beside = Path(found_here) if found_here else None
                if (beside is not None and name != "orchestrator" and beside != shipped
                        and beside not in found):
                    found.append(beside)
                    queue.append(beside)
    return tuple(found)


def module_finder():
    """A function made here, so that Ray ships it by value where a node runs it
    (driver/shipped_code.py): the package (a folder with __init__.py) or module
    `name` in `folder`, as Python finds it there, a package before a module; None
    for a folder without __init__.py (an installed package of that name outranks
    it: wandb's ./wandb logs)."""
    def find(folder: str, name: str) -> str | None:
        import os

        package = os.path.join(folder, name)
        for found, marker in ((package, os.path.join(package, "__init__.py")),
                              (f"{package}.py", f"{package}.py")):
            if os.path.isfile(marker):
                return found
        return None
    return find


_find = module_finder()


def _top_level_imports(source: Path) -> set[str]:
    """The first name of every absolute import in `source`, wherever it is (a
    function's own imports too); none where it cannot be read or parsed."""
    try:
        tree = ast.parse(source.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names
