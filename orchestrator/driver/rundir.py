"""The sweep's `--out` folder: claimed by one sweep, never mixed with another.

A sweep creates `sweep.json` (its options, storage and id) in the folder,
exclusively, before any trial runs. That file is how `--resume` finds what to
continue, and how a second sweep is stopped from overwriting the first one's
results, even one started at the same moment. Every file of the folder is
written atomically (`write_atomically`).

`sweep.json`'s `format` key (`SWEEP_FORMAT`) names the layout of the whole
folder: sweep.json, the storage's experiment and Train runs, and their
checkpoints. A folder without it (written by an earlier version) or with
another value is refused by `--resume` with one line, before Ray starts.
"""

import contextlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from orchestrator.config.dataset import DataFacts
from orchestrator.config.grid import SweepConfig
from orchestrator.driver import job_env, storage
from orchestrator.errors import UserError

SWEEP_FILE = "sweep.json"
# Bumped by any change that would leave a folder of this format unresumable.
# 3: `memory_format` replaced `channels_last`; checkpoints hold the layout.
# 4: the exercises' grid has the warm-up's twin at the largest k (its indices
#    moved), Tune's pickled estimate shapes carry steps, a folder is shuffled.
SWEEP_FORMAT = 4
TEMPORARY = "a temporary copy that Ray may delete once the job ends"
DEFAULT_STORAGE = "ray"  # without --storage, a sweep keeps Ray's state in <out>/ray
TRAIN_RUNS_DIR = "train-runs"  # <storage>/train-runs/<sweep id>: the sweep's Train runs
TUNER_STATE = "tuner.pkl"  # what Tuner.restore reads first in the experiment's folder
CALIBRATION_FILE = "calibration.json"  # the sweep's microbenchmark (driver/calibrate.py)


class StoredSweep(NamedTuple):
    """What sweep.json keeps for `--resume`."""

    sweep: SweepConfig
    storage: str
    sweep_id: str
    left_out: list[dict]
    """The preset's points the cluster could not hold when the sweep started
    (records.LeftOut's fields), for the report to name; [] in older files."""
    ran_on: dict[str, str] | None = None
    """The report's lines on the cluster the sweep started on and how its trials were
    timed ("cluster", "timing"), so that a finished sweep's report can be rewritten
    without a cluster; None in older files."""


def out_dir_for(out: str | None, label: str, storage_location: str | None) -> Path:
    """The sweep's folder: `--out` made absolute, by default results/<label>-<time>.

    Under `ray job submit` the working directory is Ray's temporary copy of
    `--working-dir` in its session folder, which Ray may delete once the job
    ends (or the head's own folder, without one): a relative `--out` or
    `--storage` is refused, and the default folder goes under a local
    `--storage` (<storage>/results/<label>-<time>).
    """
    name = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    if not job_env.under_ray_job():
        return Path(out or f"results/{name}").resolve()
    fix = ("give --out an absolute path on the head node or a shared one, or --storage an "
           "absolute local path (the results then go to <storage>/results/)")
    for flag, location in (("--out", out), ("--storage", storage_location)):
        refuse_relative_under_job(flag, location, fix)
    if out:
        return Path(out).resolve()
    if storage_location and not storage.is_uri(storage_location):
        return Path(storage_location) / "results" / name
    raise UserError(f"under `ray job submit` the default --out (results/{name}) would land in "
                    f"the job's working directory, {TEMPORARY}; {fix}")


def refuse_relative_under_job(flag: str, location: str | None, fix: str) -> None:
    """Under `ray job submit`, a relative local `location` of `flag` is refused: it
    would land in the job's working directory, which Ray may delete."""
    if (job_env.under_ray_job() and location and not storage.is_uri(location)
            and not Path(location).is_absolute()):
        raise UserError(f"{flag} {location} is relative: under `ray job submit` it would land "
                        f"in the job's working directory, {TEMPORARY}; {fix}")


def check_out_dir(out_dir: Path, *, resume: bool,
                  facts_of: Callable[[str], DataFacts] | None = None) -> StoredSweep | None:
    """Refuse a folder that this sweep must not or cannot write; on resume, what to continue.

    Returns what sweep.json stored when resuming, else None; `facts_of` reads its
    data set's facts again (SweepConfig.from_dict).
    """
    marker = out_dir / SWEEP_FILE
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file, not a folder")
    require_writable(out_dir, "--out")
    if resume:
        if not marker.is_file():
            raise UserError(f"nothing to resume in {out_dir}: it holds no {SWEEP_FILE} "
                            f"(start the sweep without --resume)")
        unreadable = f"{marker} is unreadable or not a sweep's"
        try:
            stored = json.loads(marker.read_text())
        except (OSError, ValueError) as error:
            raise UserError(f"{unreadable} ({error})")
        if isinstance(stored, dict) and stored.get("format") != SWEEP_FORMAT:
            raise UserError(f"{out_dir} was written by an earlier version and cannot be "
                            f"resumed; start a new sweep in another --out")
        try:
            left_out = stored.get("left_out", [])
            if not (isinstance(left_out, list) and all(isinstance(v, dict) for v in left_out)):
                raise TypeError(f"left_out is not a list of objects: {left_out!r}")
            ran_on = stored.get("ran_on")
            if ran_on is not None and not (isinstance(ran_on, dict) and all(
                    isinstance(ran_on.get(key), str) for key in ("cluster", "timing"))):
                raise TypeError(f"ran_on is not a cluster's and a timing's lines: {ran_on!r}")
            resumed = StoredSweep(SweepConfig.from_dict(stored["sweep"], facts_of=facts_of),
                                  str(stored["storage"]), str(stored["id"]), left_out, ran_on)
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{unreadable} ({error})")
        return resumed._replace(storage=storage_here(out_dir, resumed.storage, resumed.sweep_id))
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


def storage_here(out_dir: Path, stored: str, sweep_id: str) -> str:
    """The resumed sweep's storage: `stored` (sweep.json's), but the folder's own
    `ray/` where the sweep kept its state in its folder (no --storage) and the
    folder was copied or moved since: sweep.json names the old place, and
    resuming there would write into another folder's sweep, or into nothing.

    `stored` is another folder's own storage when it is named ray/ and its
    parent holds a sweep.json (a copy's original) or is gone (a move); an
    explicit --storage is kept wherever the folder goes. A local storage
    without the sweep's Tune state is refused in one line: Tune could not
    restore it."""
    own, old = out_dir / DEFAULT_STORAGE, Path(stored)
    if storage.is_uri(stored):
        return stored
    if old != own and old.name == DEFAULT_STORAGE and (
            not old.parent.exists() or (old.parent / SWEEP_FILE).is_file()):
        if (own / sweep_id).is_dir():
            return str(own)
        raise UserError(f"{out_dir} was copied or moved from {old.parent} without its "
                        f"{DEFAULT_STORAGE}/ folder, which holds the sweep's state: copy that "
                        f"folder along, or resume the sweep where it ran")
    if not (old / sweep_id / TUNER_STATE).is_file():
        raise UserError(f"nothing to resume in {out_dir}: its sweep's state "
                        f"({old / sweep_id / TUNER_STATE}) is not there (was its storage "
                        f"moved or deleted, or did the sweep stop before Tune began?); start "
                        f"a new sweep in another --out")
    return stored


def new_sweep_id(out_dir: Path) -> str:
    """What names a sweep's Tune experiment and Train runs in a storage that
    other sweeps may share: its folder's name, made unique."""
    return f"{out_dir.name}-{secrets.token_hex(4)}"


def claim_out_dir(out_dir: Path, sweep: SweepConfig, storage: str, sweep_id: str,
                  left_out: list[dict] = (), ran_on: dict[str, str] | None = None) -> bool:
    """Create `sweep.json` whole and exclusively: of two sweeps claiming one
    folder at once, one wins and the other gets a `UserError`. Returns whether
    the folder was made here (`release_claim` removes it then)."""
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": SWEEP_FORMAT, "sweep": sweep.to_dict(), "storage": storage,
                       "id": sweep_id, "left_out": list(left_out), "ran_on": ran_on},
                      indent=2)
    fd, temporary = tempfile.mkstemp(prefix=f".{SWEEP_FILE}.", dir=out_dir)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        # A hard link fails if the name exists: an exclusive create of a whole file.
        os.link(temporary, out_dir / SWEEP_FILE)
    except FileExistsError:
        raise UserError(f"{out_dir} was claimed by another sweep just now; choose another "
                        f"--out") from None
    finally:
        os.unlink(temporary)
    return made


def tune_began(storage_location: str, sweep_id: str) -> bool:
    """Whether Tune wrote the sweep's state (`TUNER_STATE`), which --resume restores."""
    return storage.exists(storage.join(storage_location, sweep_id, TUNER_STATE))


def release_claim(out_dir: Path, storage_location: str, sweep_id: str, made: bool) -> None:
    """Undo a new sweep's claim of `out_dir` (`claim_out_dir`), for a sweep stopped
    before Tune began: its storage's folders named by `sweep_id` (Tune's experiment and
    the Train runs, in a bucket too), the own `ray/` folder once empty, `sweep.json`
    and the calibration's file, and the folder itself where the claim made it. Only
    what the sweep wrote goes: its id is unique, and the folder held nothing before."""
    for folder in (storage.join(storage_location, sweep_id),
                   storage.join(storage_location, TRAIN_RUNS_DIR, sweep_id)):
        storage.remove_tree(folder)
    own = out_dir / DEFAULT_STORAGE
    for folder in (own / TRAIN_RUNS_DIR, own):
        with contextlib.suppress(OSError):  # not empty (another sweep's), or absent
            folder.rmdir()
    for name in (SWEEP_FILE, CALIBRATION_FILE):
        (out_dir / name).unlink(missing_ok=True)
    if made:
        with contextlib.suppress(OSError):
            out_dir.rmdir()


def require_writable(folder: Path, flag: str) -> None:
    """The folder, or its nearest existing parent, must let us create entries:
    tried with a folder made and removed at once, so that nothing is left."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".orchestrator-probe-", dir=existing))
    except OSError as error:
        raise UserError(f"{flag} {folder} cannot be created or written "
                        f"({error.strerror or error} in {existing})") from None
