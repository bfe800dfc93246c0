"""The storage's check on each node (driver/storage.node_check), run as a node
runs it: a folder it sees and can write to passes; one it sees read-only (an NFS
export mounted read-only on the workers) is named as one it cannot write to,
where every trial would have failed at its first checkpoint."""

import shutil
import subprocess
import sys

import pytest

from helpers import REPO

CHECK = ("import sys; from orchestrator.driver.storage import node_check; "
         "print(repr(node_check()(sys.argv[1], sys.argv[2], 'a' * 32)))")
# The folder bound read-only onto itself, in a mount namespace of the command's own.
READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _check(marker, token: str, *wrapper: str) -> str:
    run = subprocess.run([*wrapper, sys.executable, "-c", CHECK, str(marker), token],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


@pytest.mark.skipif(shutil.which("unshare") is None
                    or subprocess.run(["unshare", "--mount", "true"]).returncode != 0,
                    reason="a read-only mount of its own needs a mount namespace (root)")
@pytest.mark.reliability(fault="a local --storage that a node sees read-only (NFS exported "
                               "read-only, or root squashed)",
                         lost="nothing: refused before any trial, naming the node")
def test_a_node_that_reads_the_storage_but_cannot_write_there_is_named(tmp_path):
    folder = tmp_path / "storage"
    folder.mkdir()
    marker = folder / "marker"
    marker.write_text("token")
    assert _check(marker, "token") == "''"
    read_only = ("unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY,
                 str(folder))
    assert _check(marker, "token", *read_only) == repr(
        "reads it but cannot write there (Read-only file system): its workers' checkpoints "
        "could not be saved")
    assert _check(marker, "another", *read_only) == repr(
        "cannot read a file the driver wrote there (it reads 'token')")
    assert _check(folder / "gone", "token") == repr(
        "cannot read a file the driver wrote there (No such file or directory)")
    assert [path.name for path in folder.iterdir()] == ["marker"]  # nothing left beside it
