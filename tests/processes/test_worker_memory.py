"""A worker keeps the memory a training step frees for the next step
(ray_fastpath.prepare_worker_process)."""

import subprocess
import sys
import textwrap

import pytest

from helpers import REPO

# A step in a thread, as Ray Train runs it: blocks from glibc's malloc,
# written, then freed. Prints the page faults of every step after the first.
STEPS = textwrap.dedent("""
    import ctypes, resource, sys, threading
    from orchestrator.ray_fastpath import _keep_freed_memory_for_the_next_step
    if sys.argv[1] == "kept":
        _keep_freed_memory_for_the_next_step()
    num_blocks, size = int(sys.argv[2]), int(sys.argv[3]) * 1024 * 1024
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    faults = []
    def steps():
        for _ in range(6):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            blocks = [libc.malloc(size) for _ in range(num_blocks)]
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


def _faults_in_later_steps(num_blocks: int, block_mb: int) -> dict[str, int]:
    """Per mode, "default" and "kept", in a process of its own. The two run at
    once: each counts its own thread's page faults, and most of each one's
    time is importing Ray."""
    runs = {mode: subprocess.Popen([sys.executable, "-c", STEPS, mode, str(num_blocks),
                                    str(block_mb)], stdout=subprocess.PIPE, text=True, cwd=REPO)
            for mode in ("default", "kept")}
    try:
        faults = {}
        for mode, run in runs.items():
            stdout, _ = run.communicate(timeout=120)
            assert run.returncode == 0, (mode, run.returncode)
            faults[mode] = int(stdout.strip())
        return faults
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
                run.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize("num_blocks, block_mb", [
    (2, 12),  # 24 MB: the top of one heap, which glibc trims
    (3, 24),  # 72 MB: more than one 64 MB heap, and glibc unmaps the second
], ids=["trimmed", "heap-unmapped"])
def test_a_step_reuses_the_memory_the_last_one_freed(num_blocks, block_mb):
    # By default glibc hands blocks of earlier steps back to the kernel and
    # the next step faults fresh pages in (in a Ray worker, step after step;
    # see bench/notes/ray_overhead.md).
    faults = _faults_in_later_steps(num_blocks, block_mb)
    assert faults["default"] > 5000  # 24 MB: 6,144 pages
    assert faults["kept"] < 100
