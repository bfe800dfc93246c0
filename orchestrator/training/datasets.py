"""`--dataset`: Fashion-MNIST (data.py), a folder of images, or the user's own function.

Whatever the source, the driver loads it once into four arrays (`data.Images`)
that go to Ray's object store as Fashion-MNIST's do, and the run is told its
facts (`DataFacts`: sizes, image shape, classes) before any worker starts:

- `fashion-mnist`: the book's (the default);
- a folder in torchvision's ImageFolder layout, `train/<class>/*.png` and
  `test/<class>/*.png` (subfolders of a class included), every image of one size
  and 8 bits a channel (grey when every image is grey, else RGB), each split
  shuffled once in a fixed order, so that a `--train-limit` subset holds the
  classes as the folder does, not the first class's images alone;
- `package.module:function`, called with no arguments and returning
  `(train, test)`, each a pair `(images, labels)` of tensors or arrays (images
  N x C x H x W or N x H x W, any dtype; labels N integers), or a map-style
  `Dataset` of `(image, label)` items (an image a tensor, an array or a PIL image).

uint8 images are pixels, scaled to [0, 1] per batch as the book's ToTensor
does; any other dtype is taken as it is, as float32. Bad data is one line
(`UserError`) before the cluster is touched.
"""

import functools
import os
from pathlib import Path

import numpy as np

from orchestrator.config.dataset import FASHION_MNIST, DataFacts, shape_text
from orchestrator.config.references import REFERENCE, resolve
from orchestrator.errors import UserError
from orchestrator.records import counted
from orchestrator.training import data

# PIL's modes of more than 8 bits a channel: 16- and 32-bit integers (I, I;16,
# I;16B, ...) and floats (F).
WIDE_MODES = ("I", "F")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm",
                  ".ppm")


def facts(spec: str, data_dir: str | None = None) -> DataFacts:
    """What a run needs to know of its data set before it starts; Fashion-MNIST's
    without reading it (its files are checked when it is loaded)."""
    if spec == FASHION_MNIST:
        return DataFacts()
    images = _load_whole(spec, data_dir)
    return DataFacts(name=spec, train_size=len(images.train_labels),
                     test_size=len(images.test_labels),
                     input_shape=_input_shape(images.train_images),
                     num_classes=_classes(images.train_labels, images.test_labels))


def load(spec: str, data_dir: str | None = None, *, train_limit: int | None = None,
         test_limit: int | None = None) -> data.Images:
    """The data set `spec` names, cut to the first `train_limit` / `test_limit` examples."""
    if spec == FASHION_MNIST:
        return data.load(data_dir, train_limit=train_limit, test_limit=test_limit)
    whole = _load_whole(spec, data_dir)
    labels = whole.train_labels[:train_limit]
    if len(np.unique(labels)) < 2:
        raise UserError(f"--dataset {spec}: the first {len(labels)} training images (--train-limit"
                        f") are all of class {labels[0]}; a classifier needs two classes or "
                        f"more: give a larger --train-limit, or the data in mixed order")
    return data.Images(train_images=whole.train_images[:train_limit], train_labels=labels,
                       test_images=whole.test_images[:test_limit],
                       test_labels=whole.test_labels[:test_limit])


@functools.lru_cache(maxsize=2)
def _load_whole(spec: str, data_dir: str | None) -> data.Images:
    """Read once per driver: `facts` and `load` both ask."""
    if data_dir is not None:
        raise UserError(f"--data-dir is where Fashion-MNIST's files are; --dataset {spec} "
                        f"brings its own data: leave --data-dir out")
    if REFERENCE.match(spec):
        train, test = _from_function(spec)
    else:
        train, test = _from_folder(Path(spec).expanduser())
    (train_images, train_labels), (test_images, test_labels) = (
        _checked(spec, "train", *train), _checked(spec, "test", *test))
    if train_images.shape[1:] != test_images.shape[1:]:
        raise UserError(f"--dataset {spec}: train images are {_shape(train_images)} but test "
                        f"images {_shape(test_images)}: they must be of one shape")
    distinct = np.unique(np.concatenate([train_labels, test_labels]))
    if len(distinct) < 2:
        raise UserError(f"--dataset {spec}: every label is {distinct[0]}; a classifier needs two "
                        f"classes or more")
    classes = _classes(train_labels, test_labels)
    if classes > 1000 and classes > 10 * len(distinct):
        raise UserError(f"--dataset {spec}: labels go up to {classes - 1} but take "
                        f"{len(distinct)} values; classes are numbered 0 to N-1 (the model "
                        f"would get {classes} outputs)")
    return data.Images(train_images=train_images, train_labels=train_labels,
                       test_images=test_images, test_labels=test_labels)


def _from_function(reference: str) -> tuple[tuple, tuple]:
    function = resolve(reference, option="--dataset")
    try:
        returned = function()
    except Exception as error:
        raise UserError(f"--dataset {reference}: calling it raised {type(error).__name__}: "
                        f"{error}") from None
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
        raise UserError(f"--dataset {reference} returned {type(returned).__name__}; expected "
                        f"(train, test)")
    return tuple(_pair(reference, name, part) for name, part in zip(("train", "test"), returned))


def _pair(spec: str, name: str, part) -> tuple:
    """(images, labels) as arrays, from a pair of tensors or arrays or a map-style Dataset."""
    if isinstance(part, (tuple, list)) and len(part) == 2:
        return tuple(_array(item) for item in part)
    if hasattr(part, "__getitem__") and hasattr(part, "__len__"):
        if len(part) == 0:
            raise UserError(f"--dataset {spec}: the {name} set is empty")
        images, labels = [], []
        for index in range(len(part)):
            item = part[index]
            if not (isinstance(item, (tuple, list)) and len(item) >= 2):
                raise UserError(f"--dataset {spec}: {name} item {index} is "
                                f"{type(item).__name__}; expected (image, label)")
            images.append(_image_array(item[0]))
            labels.append(_array(item[1]))
        try:
            return np.stack(images), np.asarray(labels).reshape(-1)
        except ValueError:
            shapes = sorted({image.shape for image in images})[:2]
            raise UserError(f"--dataset {spec}: {name} images differ in shape ({shapes[0]} and "
                            f"{shapes[1]}, among others): they must be of one shape") from None
    raise UserError(f"--dataset {spec}: its {name} set is {type(part).__name__}; expected "
                    f"(images, labels) or a map-style Dataset of (image, label)")


def _array(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _image_array(image) -> np.ndarray:
    """A Dataset's image: a tensor or array as it is (C x H x W or H x W); a PIL
    image, whose arrays are H x W x C, turned channels-first."""
    if hasattr(image, "getbands"):  # PIL
        array = np.asarray(image)
        return array.transpose(2, 0, 1) if array.ndim == 3 else array
    return _array(image)


def _from_folder(root: Path) -> tuple[tuple, tuple]:
    if not root.is_dir():
        raise UserError(f"--dataset {root}: no such folder (and not fashion-mnist or "
                        f"package.module:function)")
    missing = [name for name in ("train", "test") if not (root / name).is_dir()]
    if missing:
        raise UserError(f"--dataset {root}: no {' or '.join(missing)} subfolder; expected "
                        f"train/<class>/<image> and test/<class>/<image> (torchvision's "
                        f"ImageFolder layout)")
    classes = sorted(entry.name for entry in os.scandir(root / "train") if entry.is_dir())
    if len(classes) < 2:
        raise UserError(f"--dataset {root}: train/ has {counted(len(classes), 'class folder')}; a "
                        f"classifier needs two or more")
    unknown = sorted(entry.name for entry in os.scandir(root / "test")
                     if entry.is_dir() and entry.name not in classes)
    if unknown:
        raise UserError(f"--dataset {root}: test/ has classes that train/ lacks: "
                        f"{', '.join(unknown)}")
    files = {name: [(path, index) for index, label in enumerate(classes)
                    for path in sorted((root / name / label).rglob("*"))
                    if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()]
             for name in ("train", "test")}
    for name in ("train", "test"):
        order = np.random.default_rng(0).permutation(len(files[name]))  # classes mixed
        files[name] = [files[name][index] for index in order]
    for name in ("train", "test"):  # torchvision's ImageFolder refuses these too
        present = {index for _, index in files[name]}
        empty = [label for index, label in enumerate(classes)
                 if (root / name / label).is_dir() and index not in present]
        if empty:
            raise UserError(f"--dataset {root}: {name}/{empty[0]} holds no images (looked for "
                            f"{', '.join(IMAGE_SUFFIXES)}): remove it or fill it")
    for name, found in files.items():
        if not found:
            raise UserError(f"--dataset {root}: no images in {name}/ (looked for "
                            f"{', '.join(IMAGE_SUFFIXES)})")
    from PIL import Image, UnidentifiedImageError

    loaded = {}
    for name, found in files.items():
        images = []
        for path, _ in found:
            try:
                with Image.open(path) as image:
                    if image.mode.startswith(WIDE_MODES):  # convert() clips them white
                        raise UserError(
                            f"--dataset {root}: {path} has more than 8 bits a channel (PIL "
                            f"mode {image.mode}): convert the folder to 8-bit images, or bring "
                            f"the data as a package.module:function of float arrays")
                    images.append(np.asarray(image.convert("RGB")))
            except (OSError, UnidentifiedImageError) as error:
                raise UserError(f"--dataset {root}: cannot read {path} ({error})") from None
            if images[-1].shape != images[0].shape:
                raise UserError(
                    f"--dataset {root}: {path} is {images[-1].shape[1]}x{images[-1].shape[0]} "
                    f"pixels but {found[0][0]} {images[0].shape[1]}x{images[0].shape[0]}: "
                    f"every image must be of one size (resize them first)")
        loaded[name] = (np.stack(images).transpose(0, 3, 1, 2),
                        np.array([index for _, index in found], dtype=np.int64))
    if all((images[:, :1] == images).all() for images, _ in loaded.values()):
        loaded = {name: (images[:, :1], labels) for name, (images, labels) in loaded.items()}
    return loaded["train"], loaded["test"]


def _checked(spec: str, name: str, images: np.ndarray, labels: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The arrays a run trains on: images [N, C, H, W] or [N, H, W], uint8 kept and
    anything else as float32; labels int64 in [0, classes)."""
    if images.ndim not in (3, 4) or len(images) == 0:
        raise UserError(f"--dataset {spec}: {name} images have shape {images.shape}; expected "
                        f"N x C x H x W or N x H x W")
    if images.ndim == 4 and images.shape[3] in (1, 3, 4) and images.shape[1] not in (1, 3, 4):
        raise UserError(f"--dataset {spec}: {name} images have shape {images.shape}, which "
                        f"looks N x H x W x C; give N x C x H x W (for a tensor, "
                        f".permute(0, 3, 1, 2))")
    if labels.ndim != 1 or len(labels) != len(images):
        raise UserError(f"--dataset {spec}: {len(images)} {name} images but labels of shape "
                        f"{labels.shape}; expected one label each")
    if not np.issubdtype(labels.dtype, np.integer):
        if not (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels))):
            raise UserError(f"--dataset {spec}: {name} labels are {labels.dtype}, not class "
                            f"numbers")
    if labels.min() < 0:
        raise UserError(f"--dataset {spec}: a {name} label is {labels.min()}; classes are "
                        f"numbered from 0")
    if images.dtype != np.uint8:
        images = images.astype(np.float32)
        if not np.isfinite(images).all():
            raise UserError(f"--dataset {spec}: {name} images hold values that are not finite")
    return np.ascontiguousarray(images), labels.astype(np.int64)


def _classes(train_labels: np.ndarray, test_labels: np.ndarray) -> int:
    """Labels are 0 to N-1: the largest of either set, plus one."""
    return int(max(train_labels.max(), test_labels.max())) + 1


def _input_shape(images: np.ndarray) -> tuple[int, int, int]:
    return (1, *images.shape[1:]) if images.ndim == 3 else tuple(images.shape[1:])


def _shape(images: np.ndarray) -> str:
    return shape_text(_input_shape(images))
