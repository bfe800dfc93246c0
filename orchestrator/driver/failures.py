"""Why a run's training failed, in one line a user can act on.

Ray Train raises `WorkerGroupError` with each failing rank's exception in
`worker_failures` (its public API), whose text is the worker's traceback:
the user needs its last line, once for all the ranks that share it, not the
screen of snippets the error's own text is (cut at Ray's limit, often before
the line that says what went wrong). A worker out of memory, the most common
failure of a model of one's own, also gets the ways out, in the run's numbers.
"""

from orchestrator.records import counted

# What torch's CUDA and CPU allocators and Ray's memory monitor say when memory runs out.
OUT_OF_MEMORY = ("OutOfMemoryError", "out of memory", "can't allocate memory",
                 "running low on memory")
LINE_CHARS = 300


def failure_text(error: BaseException, batch_size_per_worker: int | None = None) -> str:
    """`rank 0: torch.OutOfMemoryError: CUDA out of memory. ...`, one entry per
    distinct last line with the ranks that raised it; an error without worker
    failures (the controller's, a trial's wrapped by Tune) as its own last line.
    Out of memory adds what would need less, given the busiest worker's batch."""
    failures = getattr(error, "worker_failures", None) or {}
    ranks_by_line: dict[str, list[int]] = {}
    for rank, failure in sorted(failures.items()):
        ranks_by_line.setdefault(last_line(failure), []).append(rank)
    text = "; ".join(
        f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}: {line}"
        for line, ranks in ranks_by_line.items()) or last_line(error)
    if any(marker in text for marker in OUT_OF_MEMORY):
        text += f" ({out_of_memory_hint(batch_size_per_worker)})"
    return text


def last_line(error: BaseException) -> str:
    """The last non-empty line of the error's text: for a worker's traceback, the
    exception it ends with; otherwise after the error's own name."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    if "Traceback (most recent call last)" not in text or not line:
        line = f"{type(error).__name__}: {line}" if line else type(error).__name__
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 3].rstrip() + "..."


def out_of_memory_hint(batch_size_per_worker: int | None) -> str:
    at = (f" at {counted(batch_size_per_worker, 'image')} a step per worker"
          if batch_size_per_worker else "")
    return (f"a worker ran out of memory{at}: fewer images per worker (a smaller "
            f"--batch-size, or more --workers with --batch-scaling global) or --precision "
            f"bf16 needs less")
