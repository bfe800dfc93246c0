"""Where a sweep's trackers (--tracking) keep its runs, settled and checked before Ray starts.

The trackers are Tune's own logger callbacks (built in tune_experiment.py):
MLflow, TensorBoard (Tune's TBXLoggerCallback) and W&B, each logging every
trial's parameters and every result's numbers under the sweep's id. No
tracker is imported here: a missing package is found by its module's spec.
"""

import importlib.util
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.config.grid import SweepConfig
from orchestrator.driver import storage
from orchestrator.driver.rundir import require_writable
from orchestrator.errors import UserError

INSTALL_HINT = "pip install 'd2l-ray-orchestrator[tracking]'"
# The modules each tracker needs where the sweep runs; `tensorboard` is the
# viewer the printed line calls (Tune writes the event files with tensorboardX).
TRACKER_MODULES = {"mlflow": ("mlflow",), "tensorboard": ("tensorboard", "tensorboardX"),
                   "wandb": ("wandb",)}
# MLflow's SQL store (mlflow-skinny leaves these out).
SQLITE_MODULES = ("sqlalchemy", "alembic")
WANDB_PROJECT = "d2l-ray-orchestrator"


@dataclass(frozen=True)
class Trackers:
    """The sweep's trackers and where each keeps the sweep's runs."""

    names: tuple[str, ...]
    sweep_id: str
    """The MLflow experiment, the W&B group."""
    mlflow_uri: str | None
    mlflow_folder: Path | None
    """The local folder MLflow writes (a SQLite file's, a file store); None for a server."""
    tensorboard_logdir: str | None
    """The Tune experiment's folder: one subfolder of event files per trial."""
    wandb_project: str | None
    wandb_mode: str | None
    """online, or offline (no API key): `wandb sync` uploads an offline run later."""
    wandb_dir: Path | None
    """Holds W&B's `wandb/` folder of runs."""

    def lines(self) -> list[str]:
        """Where each tracker's runs are, one line each, as printed and in the report."""
        lines = []
        if self.mlflow_uri:
            lines.append(f"MLflow: experiment {self.sweep_id} in {self.mlflow_uri} "
                         f"(mlflow ui --backend-store-uri {self.mlflow_uri})")
        if self.tensorboard_logdir:
            lines.append(f"TensorBoard: event files per trial under {self.tensorboard_logdir} "
                         f"({self.tensorboard_command})")
        if self.wandb_mode:
            where = f"project {self.wandb_project}, group {self.sweep_id}"
            if self.wandb_mode == "offline":
                where += (f", offline in {self.wandb_dir / 'wandb'} (wandb sync "
                          f"{self.wandb_dir / 'wandb'}/offline-run-* uploads them)")
            lines.append(f"W&B: {where}")
        return lines

    @property
    def tensorboard_command(self) -> str | None:
        """The line a user pastes to see the sweep in TensorBoard."""
        if self.tensorboard_logdir is None:
            return None
        return f"tensorboard --logdir {self.tensorboard_logdir}"


def resolve(sweep: SweepConfig, *, out_dir: Path, storage_location: str,
            sweep_id: str) -> Trackers:
    """The sweep's trackers, each checked: its packages installed, MLflow's
    local store writable, W&B's credentials for an online run."""
    names = sweep.tracking
    for tracker in names:
        for module in TRACKER_MODULES[tracker]:
            _require_module(module, tracker)
    mlflow_uri = mlflow_folder = None
    if "mlflow" in names:
        mlflow_uri, mlflow_folder = _mlflow_store(
            sweep.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            or f"sqlite:///{out_dir / 'mlflow.db'}")
        if mlflow_uri.startswith("sqlite:"):
            for module in SQLITE_MODULES:
                _require_module(module, "mlflow", what=f"with {mlflow_uri}")
        if mlflow_folder is not None:
            require_writable(mlflow_folder, "--tracking-uri")
    wandb_project = wandb_mode = wandb_dir = None
    if "wandb" in names:
        wandb_project = os.environ.get("WANDB_PROJECT") or WANDB_PROJECT
        wandb_mode = os.environ.get("WANDB_MODE") or (
            "online" if _wandb_api_key_found() else "offline")
        if wandb_mode == "online" and not _wandb_api_key_found():
            raise UserError("WANDB_MODE=online but no W&B API key: set WANDB_API_KEY or run "
                            "`wandb login`, or unset WANDB_MODE to keep the runs offline")
        wandb_dir = Path(os.environ.get("WANDB_DIR") or out_dir).resolve()
    logdir = storage.join(storage_location, sweep_id) if "tensorboard" in names else None
    if logdir is not None and logdir.startswith("file://"):
        logdir = logdir[len("file://"):]  # TensorBoard reads a path (or a bucket's URI)
    return Trackers(names=names, sweep_id=sweep_id, mlflow_uri=mlflow_uri,
                    mlflow_folder=mlflow_folder, tensorboard_logdir=logdir,
                    wandb_project=wandb_project, wandb_mode=wandb_mode, wandb_dir=wandb_dir)


def _require_module(module: str, tracker: str, *, what: str = "") -> None:
    if importlib.util.find_spec(module) is None:
        raise UserError(f"--tracking {tracker}{' ' + what if what else ''} needs the {module} "
                        f"package: {INSTALL_HINT}")


def _mlflow_store(uri: str) -> tuple[str, Path | None]:
    """The URI with a local path made absolute (the report names it from anywhere),
    and the local folder MLflow writes; None for a server."""
    scheme = urlsplit(uri).scheme
    if scheme == "sqlite":
        prefix = "sqlite:///"
        if not uri.startswith(prefix) or uri == prefix:
            raise UserError(f"--tracking-uri {uri}: a SQLite URI is sqlite:///relative/FILE.db "
                            f"or sqlite:////absolute/FILE.db")
        path = Path(uri[len(prefix):]).resolve()
        return f"{prefix}{path}", path.parent
    if scheme in ("file", ""):  # MLflow's file store, a folder
        folder = Path(urlsplit(uri).path if scheme else uri).resolve()
        return f"file://{folder}", folder
    return uri, None


def _wandb_api_key_found() -> bool:
    """WANDB_API_KEY, or the ~/.netrc entry that `wandb login` writes for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
