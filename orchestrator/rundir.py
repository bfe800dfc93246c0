"""The sweep's `--out` folder: claimed by one sweep, never mixed with another.

A sweep writes `sweep.json` (its options and storage) into the folder before
any trial runs. That file is how `--resume` finds what to continue, and how a
second sweep is stopped from overwriting the first one's results. Every file
of the folder is written atomically (`write_atomically`).
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.config import SweepConfig
from orchestrator.errors import UserError

SWEEP_FILE = "sweep.json"


def check_out_dir(out_dir: Path, *, resume: bool) -> tuple[SweepConfig, str] | None:
    """Refuse a folder that this sweep must not write; on resume, what to continue.

    Returns the stored (sweep, storage path) when resuming, else None.
    """
    marker = out_dir / SWEEP_FILE
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file, not a folder")
    if resume:
        if not marker.is_file():
            raise UserError(f"nothing to resume in {out_dir}: it holds no {SWEEP_FILE} "
                            f"(start the sweep without --resume)")
        try:
            stored = json.loads(marker.read_text())
            return SweepConfig.from_dict(stored["sweep"]), str(stored["storage"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"{marker} is unreadable or not a sweep's ({error})")
    if marker.exists():
        raise UserError(f"{out_dir} already holds a sweep's results; add --resume to "
                        f"continue it, or choose another --out")
    try:
        occupied = out_dir.is_dir() and any(out_dir.iterdir())
    except OSError as error:
        raise UserError(f"--out {out_dir} is unreadable ({error})")
    if occupied:
        raise UserError(f"{out_dir} is not empty and holds no sweep of ours; choose an empty "
                        f"or new --out folder")
    return None


def claim_out_dir(out_dir: Path, sweep: SweepConfig, storage: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"sweep": sweep.to_dict(), "storage": storage}, indent=2)
    write_atomically(out_dir / SWEEP_FILE, lambda path: path.write_text(text))


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write to a temporary sibling, then rename: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
