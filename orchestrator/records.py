"""Writing and reading a sweep's records: atomic files, the book's line from an
epoch history, and the names the files share. Driver, workers and report all
use them; no Ray, no torch."""

import os
import statistics
from collections.abc import Callable
from pathlib import Path

# calibration.json's transport of `sharded`'s two collectives, timed as one:
# "<group> reduce-scatter + all-gather" (gloo's reduce-scatter is no ring).
SHARDED_PAIR = "reduce-scatter + all-gather"


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write to a temporary sibling, then rename: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def book_line(history: list[dict]) -> str:
    """The line the book prints after training, e.g.
    `test acc: 0.84, 3.1 sec/epoch on 2 workers [cpu, cpu]`."""
    last = history[-1]
    seconds_per_epoch = statistics.fmean(row["epoch_time_s"] for row in history)
    workers = "worker" if last["num_workers"] == 1 else "workers"
    return (f"test acc: {last['test_acc']:.2f}, {seconds_per_epoch:.1f} sec/epoch "
            f"on {last['num_workers']} {workers} {last['devices']}")
