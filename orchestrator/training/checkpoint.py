"""A training run's checkpoint format: what each epoch's checkpoint folder holds.

Rank 0 saves one at every evaluation (worker.report_to_ray) and Ray Train keeps
it in the run's storage as a `checkpoint_*` folder; a restarted worker group
loads it to resume, and the sweep reads a trial's epochs and evaluations from
the newest one. The state is always the last finished epoch's, but for a run
that ended at its target accuracy mid-epoch (`--stop-at-target`): its last
state is the one that reached it, and a resume trains no more.
No Ray and no pandas here: every worker imports this module.
"""

import json
from pathlib import Path

import pyarrow.fs
import torch

STATE_FILE = "state.pt"
HISTORY_FILE = "history.json"
EVALUATIONS_FILE = "evaluations.json"
# How Ray Train names the checkpoint folders of a run; it orders them by time.
CHECKPOINT_PREFIX = "checkpoint_"


def save_checkpoint(folder: Path, state: dict | None, history: list[dict],
                    evaluations: list[dict]) -> None:
    """The model and optimizer `state` (None: a diverged run's, not kept), the epoch
    `history` and the `evaluations` so far, into `folder`."""
    if state is not None:
        torch.save(state, folder / STATE_FILE)
    (folder / HISTORY_FILE).write_text(json.dumps(history))
    (folder / EVALUATIONS_FILE).write_text(json.dumps(evaluations))


def load_checkpoint(folder: Path) -> tuple[dict | None, list[dict], list[dict]]:
    """What `save_checkpoint` wrote: the state on the CPU (or None), the history,
    the evaluations."""
    state = None
    if (folder / STATE_FILE).exists():
        # weights_only: a checkpoint holds tensors and plain containers, never code.
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    return (state, json.loads((folder / HISTORY_FILE).read_text()),
            json.loads((folder / EVALUATIONS_FILE).read_text()))


def read_newest_history(train_run: str) -> tuple[list[dict], list[dict]] | None:
    """The (epoch history, evaluations) in a Train run's newest readable checkpoint;
    None if it has none.

    `train_run` is the run's folder in Ray's storage, a path or a URI.
    """
    texts = _read_newest_texts(train_run, CHECKPOINT_PREFIX, HISTORY_FILE, EVALUATIONS_FILE)
    if texts is None:
        return None
    try:
        history, evaluations = (json.loads(text) for text in texts)
    except ValueError:
        return None
    if not isinstance(history, list) or not isinstance(evaluations, list):
        return None
    return history, evaluations


def _read_newest_texts(folder: str, prefix: str, *file_names: str) -> tuple[str, ...] | None:
    """The texts of `file_names` in the newest subfolder of `folder` named
    `prefix*` where all of them are readable.

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
            return tuple(_read_text(filesystem, f"{root}/{name}/{file_name}")
                         for file_name in file_names)
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _read_text(filesystem: pyarrow.fs.FileSystem, path: str) -> str:
    with filesystem.open_input_stream(path) as stream:
        return stream.read().decode()
