import gzip
import shutil

import numpy as np
import pytest

from orchestrator.training import data
from orchestrator.errors import UserError


def test_real_files_pass_their_checksums_and_have_the_documented_shapes():
    dataset = data.load()
    assert dataset.train_images.shape == (60_000, 28, 28)
    assert dataset.test_images.shape == (10_000, 28, 28)
    assert dataset.train_images.dtype == np.uint8
    # Ten balanced classes: 6,000 training and 1,000 test images each.
    assert np.bincount(dataset.train_labels).tolist() == [6_000] * 10
    assert np.bincount(dataset.test_labels).tolist() == [1_000] * 10


def test_limits_take_the_first_examples():
    dataset = data.load(train_limit=100, test_limit=10)
    assert len(dataset.train_images) == 100 and len(dataset.test_labels) == 10


@pytest.fixture
def data_copy(tmp_path):
    source = data.locate()
    for spec in data.FILES:
        found = data._path_of(source, spec)
        shutil.copy(found, tmp_path / found.name)
    return tmp_path


def _gz(folder, name):
    path = folder / f"{name}.gz"
    if not path.exists():  # a torchvision folder holds the files uncompressed too
        path.write_bytes(gzip.compress((folder / name).read_bytes()))
        (folder / name).unlink()
    return path


@pytest.mark.reliability(fault="a truncated data file", lost="nothing")
def test_truncated_file_names_the_file_and_the_fix(data_copy):
    path = _gz(data_copy, "train-labels-idx1-ubyte")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(UserError, match=r"train-labels-idx1-ubyte\.gz: truncated or corrupt") as raised:
        data.load(data_copy)
    assert "apt-get install dataset-fashion-mnist" in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.reliability(fault="a data file with wrong contents", lost="nothing")
def test_wrong_contents_fail_the_checksum(data_copy):
    path = _gz(data_copy, "t10k-labels-idx1-ubyte")
    payload = bytearray(gzip.decompress(path.read_bytes()))
    payload[-1] ^= 1  # one flipped bit in a valid archive
    path.write_bytes(gzip.compress(bytes(payload)))
    with pytest.raises(UserError, match=r"t10k-labels-idx1-ubyte\.gz: checksum mismatch"):
        data.load(data_copy)


@pytest.mark.reliability(fault="a missing data file", lost="nothing")
def test_missing_file_in_a_named_folder_is_named(data_copy):
    _gz(data_copy, "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(UserError, match=r"missing t10k-images-idx3-ubyte\.gz"):
        data.load(data_copy)


def test_environment_variable_names_the_folder(data_copy, monkeypatch, tmp_path_factory):
    empty = tmp_path_factory.mktemp("empty")
    monkeypatch.setenv(data.DATA_DIR_ENV, str(empty))
    with pytest.raises(UserError, match=f"{empty}: missing"):
        data.locate()
    monkeypatch.setenv(data.DATA_DIR_ENV, str(data_copy))
    assert data.locate() == data_copy
