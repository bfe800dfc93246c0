"""What every benchmark shares: its one result line, and where results are kept.

A benchmark prints `BENCH {json}` once, and appends the same record to
bench/results/<name>.jsonl; `bench/report.py` builds docs/BENCHMARKS.md from
those files, so the table is regenerated, never typed.
"""

import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"


def machine() -> str:
    """Cores, CPU model and its widest vector unit: sessions here get CPUs that
    share a model name ("AMD EPYC") but not torch's kernels (AVX-512 or AVX2),
    so records from different days may not be comparable."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in lines if line.startswith("flags"))
        cpu += " (AVX-512)" if "avx512f" in flags else " (AVX2)" if "avx2" in flags else ""
    except (OSError, StopIteration):
        pass
    if os.environ.get("ATEN_CPU_CAPABILITY"):  # torch told to use narrower kernels
        cpu += f", torch capped at {os.environ['ATEN_CPU_CAPABILITY']}"
    return f"{os.cpu_count()} cores, {cpu}"


def emit(name: str, command: str, figures: dict, *, append: bool = True,
         measured_on: str | None = None, out: str | None = None) -> dict:
    """Print the BENCH line and append it to the results, unless `append` is
    false: a smoke run of a script, whose figures must not become the newest.
    `measured_on`: the machine that measured, where it is not this one (a
    benchmark that reads a sweep's files records the processor the sweep ran on).
    `out`: a folder whose files come back from a lent GPU: the record is written
    there as <name>.jsonl, to be appended here, and not appended where it ran."""
    record = {"benchmark": name, "date": datetime.date.today().isoformat(),
              "machine": measured_on or machine(), "command": command, "commit": commit(),
              **figures}
    print("BENCH " + json.dumps(record), flush=True)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.jsonl").write_text(json.dumps(record) + "\n")
    if not append or out:
        return record
    RESULTS_DIR.mkdir(exist_ok=True)
    with open(RESULTS_DIR / f"{name}.jsonl", "a") as results:
        results.write(json.dumps(record) + "\n")
    return record


def commit() -> str:
    """The code that ran: HEAD's short hash, "+changes" where the work tree differs."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout
    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no").strip()
                   else "")


def command_line() -> str:
    return " ".join(["python", *sys.argv])


def median(values) -> float:
    return statistics.median(values)


def free_port() -> int:
    """A local TCP port free now, for a gloo group's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# A benchmark's part run in a node of a netns cluster hands its figures back
# to the part that started it as one line of its output.
CHILD_RESULT_PREFIX = "CHILD_RESULT "


def print_child_result(figures: dict) -> None:
    print(CHILD_RESULT_PREFIX + json.dumps(figures), flush=True)


def child_result(cluster, argv: list[str], timeout_s: float) -> dict:
    """Run `argv` in the head node of `cluster` (tools/netns_cluster.py) from the
    repository, and return what it gave `print_child_result`; its output's tail,
    and exit, if it failed or gave nothing."""
    run = cluster.run_in("head", argv, cwd=str(REPO), timeout=timeout_s)
    lines = [line for line in run.stdout.splitlines() if line.startswith(CHILD_RESULT_PREFIX)]
    if run.returncode != 0 or not lines:
        sys.exit(run.stdout[-3000:] + run.stderr[-3000:])
    return json.loads(lines[-1][len(CHILD_RESULT_PREFIX):])
