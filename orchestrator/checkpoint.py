"""A training run's checkpoint format: what each epoch's checkpoint folder holds.

Rank 0 saves one after every epoch (worker.report_to_ray) and Ray Train keeps
it in the run's storage as a `checkpoint_*` folder; a restarted worker group
loads it to resume, and the sweep reads a trial's epochs from the newest one.
No Ray and no pandas here: every worker imports this module.
"""

import json
from pathlib import Path

import pyarrow.fs
import torch

STATE_FILE = "state.pt"
HISTORY_FILE = "history.json"
# How Ray Train names the checkpoint folders of a run; it orders them by time.
CHECKPOINT_PREFIX = "checkpoint_"


def save_checkpoint(folder: Path, state: dict | None, history: list[dict]) -> None:
    """The model and optimizer `state` (None: a diverged run's, not kept), and the
    epoch `history` so far, into `folder`."""
    if state is not None:
        torch.save(state, folder / STATE_FILE)
    (folder / HISTORY_FILE).write_text(json.dumps(history))


def load_checkpoint(folder: Path) -> tuple[dict | None, list[dict]]:
    """What `save_checkpoint` wrote: the state on the CPU (or None), and the history."""
    state = None
    if (folder / STATE_FILE).exists():
        # weights_only: a checkpoint holds tensors and plain containers, never code.
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    return state, json.loads((folder / HISTORY_FILE).read_text())


def read_newest_history(train_run: str) -> list[dict] | None:
    """The epoch history in a Train run's newest readable checkpoint; None if it has none.

    `train_run` is the run's folder in Ray's storage, a path or a URI.
    """
    text = _read_newest_text(train_run, CHECKPOINT_PREFIX, HISTORY_FILE)
    if text is None:
        return None
    try:
        history = json.loads(text)
    except ValueError:
        return None
    return history if isinstance(history, list) else None


def _read_newest_text(folder: str, prefix: str, file_name: str) -> str | None:
    """`file_name` in the newest readable subfolder of `folder` named `prefix*`.

    Subfolders are ordered by name (Ray names checkpoints by time); a file
    that cannot be read, say half copied when its writer died, is passed
    over for the next newest.
    """
    filesystem, root = pyarrow.fs.FileSystem.from_uri(folder)
    entries = filesystem.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True))
    names = sorted((entry.base_name for entry in entries
                    if entry.type == pyarrow.fs.FileType.Directory
                    and entry.base_name.startswith(prefix)), reverse=True)
    for name in names:
        try:
            with filesystem.open_input_stream(f"{root}/{name}/{file_name}") as stream:
                return stream.read().decode()
        except (OSError, UnicodeDecodeError):
            continue
    return None
