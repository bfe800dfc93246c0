"""Whether every node runs the code the job ships.

Ray puts the driver's current folder, and its script's folder where that is on
the driver's sys.path, ahead of the job's `py_modules` on every worker's
sys.path (its worker.py; ray-project/ray#43182, open): a node that holds
another version of this package, or of the user's module, at that path (a
clone on each machine, files synced once by the cluster launcher) imports it
and trains other code in silence. After connecting, a task on each alive node
lists what it holds there under each shipped name, and the driver refuses in
one line a copy whose files differ from the ones it ships. A copy that matches,
the same image on every node, is as good as the shipped one.
"""

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.config.references import module_finder
from orchestrator.driver.node_tasks import on_each_node
from orchestrator.errors import UserError
from orchestrator.records import counted

NODE_CHECK_TIMEOUT_S = 60.0


def shadowing_folders() -> list[str]:
    """The folders Ray puts ahead of the job's code on every worker: the script's,
    where this process has it on its sys.path, and the current one."""
    script = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv[0] else None
    folders = [script] if script and script in sys.path else []
    return [*folders, os.path.abspath(os.curdir)]


def digester():
    """A function made here, so that Ray ships it by value (a node runs it whatever
    copy of this package it holds): of a module's file or a package's folder, each
    .py file's path in it and its SHA-256's first 16 hex digits."""
    def digests(path: str) -> dict[str, str]:
        import hashlib
        import os

        if os.path.isfile(path):
            files = [path]
        else:
            files = [os.path.join(folder, name) for folder, _, names in os.walk(path)
                     if "__pycache__" not in folder.split(os.sep)
                     for name in names if name.endswith(".py")]
        # A module's file by its own name, a package's files by their paths in it.
        start = os.path.dirname(path) if files == [path] else path
        listed = {}
        for file in files:
            try:
                with open(file, "rb") as opened:
                    listed[os.path.relpath(file, start)] = hashlib.sha256(
                        opened.read()).hexdigest()[:16]
            except OSError:  # an editor's lock file, a link to nothing: not imported
                continue
        return listed
    return digests


def node_copies():
    """A node's part (by value, as `digester`): for each name, the first copy in
    `folders` (a package's folder, or a module's file) and its digests."""
    digests, find = digester(), module_finder()

    def copies(folders: list[str], names: list[str]) -> dict[str, list]:
        found = {}
        for name in names:
            for folder in folders:
                candidate = find(folder, name)
                if name not in found and candidate is not None:
                    found[name] = [candidate, digests(candidate)]
        return found
    return copies


def require_shipped_code_on_every_node(shipped: tuple[str, ...]) -> None:
    """Refuse, naming the node, a copy of a shipped package or module at a folder Ray
    puts ahead of it on that node's workers (`shadowing_folders`) whose files
    differ from the shipped ones. Files one side lacks are not compared, nor
    those git ignores here (Ray ships a folder less what its .gitignore lists)."""
    import ray

    if not shipped:
        return
    digests = digester()
    ours = {_module_name(Path(path)): _not_ignored(Path(path), digests(path)) for path in shipped}
    folders = shadowing_folders()
    nodes = [node for node in ray.nodes() if node["Alive"]]
    answers = on_each_node(node_copies(), nodes, NODE_CHECK_TIMEOUT_S,
                           lambda node: (folders, sorted(ours)))
    for answer in answers:
        # A node that does not answer, or whose task failed, is left to the trials:
        # this check adds no failure.
        if not answer.answered or answer.error is not None:
            continue
        node, held = answer.node, answer.value
        for name, (path, theirs) in sorted(held.items()):
            differ = sorted(file for file in theirs.keys() & ours[name].keys()
                            if theirs[file] != ours[name][file])
            if differ:
                verb = "differs" if len(differ) == 1 else "differ"
                raise UserError(
                    f"node {node['NodeID']} at {node['NodeManagerAddress']} holds another "
                    f"version of {name} at {path} ({counted(len(differ), 'file')} {verb}, "
                    f"{differ[0]} first), which Ray puts ahead of the code this job ships on "
                    f"that node's workers' path: update that copy, or start the driver from a "
                    f"folder that holds none (Ray puts the current folder and the script's "
                    f"there)")


def _not_ignored(path: Path, listed: dict[str, str]) -> dict[str, str]:
    """`listed` (a shipped folder's or file's digests) less the files git ignores
    there, which Ray does not ship (it leaves out what a .gitignore lists); all of
    them where git cannot tell (no git, no repository)."""
    try:
        run = subprocess.run(["git", "-C", str(path if path.is_dir() else path.parent),
                              "check-ignore", "--stdin"], input="\n".join(listed),
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return listed
    ignored = set(run.stdout.splitlines()) if run.returncode == 0 else set()
    return {file: digest for file, digest in listed.items() if file not in ignored}


def _module_name(path: Path) -> str:
    """The name a shipped folder or file is imported by."""
    return path.stem if path.is_file() else path.name
