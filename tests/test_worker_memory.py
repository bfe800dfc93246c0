"""A worker keeps the memory a training step frees for the next step."""

import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

# A step in a thread, as Ray Train runs it: two 12 MB blocks from glibc's
# malloc, written, then freed. Prints the page faults of every step after
# the first.
STEPS = textwrap.dedent("""
    import ctypes, resource, sys, threading
    from orchestrator.worker import _keep_freed_memory_for_the_next_step
    if sys.argv[1] == "kept":
        _keep_freed_memory_for_the_next_step()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    size = 12 * 1024 * 1024
    faults = []
    def steps():
        for _ in range(6):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            blocks = [libc.malloc(size) for _ in range(2)]
            for block in blocks:
                libc.memset(block, 1, size)
            for block in blocks:
                libc.free(block)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    thread = threading.Thread(target=steps)
    thread.start()
    thread.join()
    print(sum(faults[1:]))
""")


def _faults_in_later_steps(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True,
                         check=True, cwd=REPO)
    return int(run.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_step_reuses_the_memory_the_last_one_freed():
    # By default glibc hands the first steps' blocks back to the kernel and
    # the next step faults fresh pages in (until its thresholds adapt; in a
    # Ray worker they kept doing so, see bench/notes/ray_overhead.md).
    assert _faults_in_later_steps("default") > 5000  # 24 MB is 6,144 pages
    assert _faults_in_later_steps("kept") < 100
