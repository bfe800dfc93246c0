"""Find, verify and load Fashion-MNIST.

The driver loads the data once (here) and puts it in Ray's object store;
workers read it from there, so a node without the files still trains.
"""

import gzip
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orchestrator.config.dataset import TEST_SIZE, TRAIN_SIZE
from orchestrator.errors import UserError

DATA_DIR_ENV = "FASHION_MNIST_DIR"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
# torchvision.datasets.FashionMNIST(root) keeps its files in <root>/FashionMNIST/raw.
DOWNLOAD_ROOT = Path.home() / ".cache" / "d2l-orchestrator"
HOW_TO_GET = (
    "apt-get install dataset-fashion-mnist, or pass --data-dir / set "
    f"{DATA_DIR_ENV} to a folder with the four Fashion-MNIST files"
)


@dataclass(frozen=True)
class _IdxFile:
    name: str
    payload_md5: str
    """MD5 of the decompressed idx bytes. Not the published MD5 of the .gz:
    Debian's package recompresses the archives, the payload is the same."""
    shape: tuple[int, ...]


FILES = (
    _IdxFile("train-images-idx3-ubyte", "f4a8712d7a061bf5bd6d2ca38dc4d50a", (TRAIN_SIZE, 28, 28)),
    _IdxFile("train-labels-idx1-ubyte", "9018921c3c673c538a1fc5bad174d6f9", (TRAIN_SIZE,)),
    _IdxFile("t10k-images-idx3-ubyte", "8181f5470baa50b63fa0f6fddb340f0a", (TEST_SIZE, 28, 28)),
    _IdxFile("t10k-labels-idx1-ubyte", "15d484375f8d13e6eb1aabb0c3f46965", (TEST_SIZE,)),
)


@dataclass(frozen=True)
class Images:
    """A data set as the workers get it: images [N, C, H, W] or [N, H, W] (uint8
    pixels, else float32; Fashion-MNIST's uint8 [N, 28, 28]) and integer labels
    [N] (Fashion-MNIST's uint8); converted per batch (step.to_model_input)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def locate(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding the four files, searched in the documented order.

    A folder the user named (argument or environment variable) must be
    complete; the well-known places are skipped when they are not.
    """
    named = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if named:
        folder = Path(named).expanduser()
        for candidate in (folder, folder / "FashionMNIST" / "raw"):
            if not _missing(candidate):
                return candidate
        raise UserError(f"{folder}: missing {_missing(folder)[0]}.gz; {HOW_TO_GET}")
    for folder in (DEBIAN_DIR, DOWNLOAD_ROOT / "FashionMNIST" / "raw"):
        if not _missing(folder):
            return folder
    return _download()


def load(data_dir: str | os.PathLike | None = None, *,
         train_limit: int | None = None, test_limit: int | None = None) -> Images:
    """Load (the first `train_limit` / `test_limit` examples of) Fashion-MNIST."""
    folder = locate(data_dir)
    train_images, train_labels, test_images, test_labels = (
        read_idx(_path_of(folder, spec), spec) for spec in FILES)
    return Images(
        train_images=train_images[:train_limit], train_labels=train_labels[:train_limit],
        test_images=test_images[:test_limit], test_labels=test_labels[:test_limit])


def read_idx(path: Path, spec: _IdxFile) -> np.ndarray:
    """Read one idx file (gzipped or not), verifying its checksum first."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise UserError(f"{path}: truncated or corrupt ({error}); get it again: {HOW_TO_GET}")
    digest = hashlib.md5(raw).hexdigest()
    if digest != spec.payload_md5:
        raise UserError(
            f"{path}: checksum mismatch (MD5 of contents {digest}, expected "
            f"{spec.payload_md5}), the file is corrupt or not Fashion-MNIST; get it again: "
            f"{HOW_TO_GET}")
    # The checksum pins the header too: 4 magic bytes, then one int32 per dimension.
    header_size = 4 + 4 * len(spec.shape)
    return np.frombuffer(raw, dtype=np.uint8, offset=header_size).reshape(spec.shape)


def _path_of(folder: Path, spec: _IdxFile) -> Path:
    plain = folder / spec.name
    return plain if plain.exists() else folder / f"{spec.name}.gz"


def _missing(folder: Path) -> list[str]:
    return [spec.name for spec in FILES
            if not (folder / spec.name).exists() and not (folder / f"{spec.name}.gz").exists()]


def _download() -> Path:
    # Imported here: torchvision is only needed on a machine without the files.
    import torchvision

    try:
        for train in (True, False):
            torchvision.datasets.FashionMNIST(str(DOWNLOAD_ROOT), train=train, download=True)
    except Exception as error:  # any network or disk failure ends the same way
        raise UserError(
            f"Fashion-MNIST not found in {DEBIAN_DIR} or {DOWNLOAD_ROOT} and the download "
            f"failed ({type(error).__name__}: {error}); {HOW_TO_GET}") from error
    return DOWNLOAD_ROOT / "FashionMNIST" / "raw"
