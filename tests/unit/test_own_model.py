"""A model and a data set of the user's own (`--model`, `--dataset`): references
resolved, built and run on the driver before anything starts, data sets read
from a function or an ImageFolder folder into the arrays the workers train on,
their facts told to the run, the user's code shipped to an attached cluster,
the answers written for any model, and the equivalence check's verdict. The
runs on Ray: tests/cluster/test_own_model_on_ray.py and test_code_shipping.py."""

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from helpers import REPO, hang_limit, run_main
from orchestrator.config.grid import SweepConfig
from orchestrator.config.options import TrainConfig
from orchestrator.driver import equivalence, job_env
from orchestrator.driver.checks import data_facts
from orchestrator.errors import UserError
from orchestrator.report.answers import sheet
from orchestrator.training import datasets
from orchestrator.training.step import to_model_input
from orchestrator.training.models import build_model, check_model

RECORDED = Path(__file__).parents[1] / "data" / "own-model-sweep"


def test_a_model_of_the_users_own_is_built_seeded_and_checked_on_a_batch():
    facts = check_model("own_code:mlp", num_classes=3, input_shape=(1, 20, 20))
    assert facts.parameters == 400 * 32 + 32 + 32 * 3 + 3
    first, again, other = (build_model("own_code:mlp", seed=seed, num_classes=3,
                                       input_shape=(1, 20, 20)) for seed in (0, 0, 1))
    assert torch.equal(first[1].weight, again[1].weight)  # the seed repeats its own init
    assert not torch.equal(first[1].weight, other[1].weight)
    # The book's LeNet drawn for other images: its dense layer takes their size.
    assert build_model("lenet", seed=0, num_classes=4, input_shape=(3, 32, 32))[0].in_channels == 3
    lenet = build_model("lenet", seed=0, num_classes=4, input_shape=(1, 32, 32))
    assert lenet[7].in_features == 50 * 5 * 5 and lenet[9].out_features == 4


@pytest.mark.parametrize("reference, fragment", [
    ("no_such_module:model", "--model no_such_module:model: cannot import no_such_module"),
    ("own_code:missing", "--model own_code:missing: own_code has no missing"),
    ("own_code:NOT_A_FUNCTION", "NOT_A_FUNCTION is int, not a function"),
    ("own_code:returns_a_string", "returned str, not a torch.nn.Module"),
    ("own_code:raises", "raised RuntimeError: no such width"),
    ("own_code:lazy", "has lazy layers (LazyLinear)"),
    ("own_code:eager_wrong_logits", "gave (2, 4); expected logits of shape (2, 3)"),
])
def test_a_model_the_workers_could_not_train_is_one_line(reference, fragment):
    with pytest.raises(UserError, match=None) as error:
        check_model(reference, num_classes=3, input_shape=(1, 20, 20))
    assert fragment in str(error.value)
    assert "\n" not in str(error.value)


def test_a_model_put_on_cuda_is_one_line_with_the_way_out():
    """A builder that calls .cuda() (many a user's script does) is refused: on a
    driver with a GPU its model would hold a CUDA context and cached memory on the
    workers' GPU for the whole run (and CPU workers could not build it); on one
    without (a CPU head node, this machine) torch's error comes with the way out.
    So does a forward that makes its tensors on CUDA."""
    shape = dict(num_classes=3, input_shape=(1, 20, 20))
    with pytest.raises(UserError) as error:
        check_model("own_code:on_cuda", **shape)
    way_out = ("build it on the CPU (no .cuda(), no .to('cuda')): the driver checks it on its "
               "CPU before anything starts, and each worker moves it to its own device")
    if torch.cuda.is_available():
        assert str(error.value) == f"--model own_code:on_cuda returned a model on cuda:0: {way_out}"
        return
    # torch's error: a RuntimeError (CUDA's wheels) or an AssertionError (CPU-only ones).
    assert str(error.value).startswith("--model own_code:on_cuda: calling it with num_classes=3, "
                                       "input_shape=(1, 20, 20) raised ")
    assert str(error.value).endswith(f": {way_out}") and "\n" not in str(error.value)
    with pytest.raises(UserError) as error:
        check_model("own_code:forward_on_cuda", **shape)
    assert str(error.value).startswith("--model own_code:forward_on_cuda: a batch of shape "
                                       "(2, 1, 20, 20) raised ")
    assert str(error.value).endswith(": make its forward put what it makes on its input's "
                                     "device (x.device), not on CUDA: the driver runs a batch "
                                     "through it on its CPU before anything starts, and each "
                                     "worker on its own device")
    # Not for an error of its own that names no device.
    with pytest.raises(UserError) as error:
        check_model("own_code:raises", **shape)
    assert str(error.value).endswith("raised RuntimeError: no such width")


def test_a_model_with_parameters_the_loss_does_not_reach_is_refused_for_ddp_only():
    """torch's DDP fails such a model's every step on the workers (no retry mends
    it): refused in one line where a run or a sweep would use ddp; the other syncs
    sum the gradients there are, and the spare layer's 20 parameters still count."""
    shape = dict(num_classes=3, input_shape=(1, 20, 20))
    facts = check_model("own_code:unused_parameters", **shape, syncs=("scratch", "sharded"))
    assert facts.parameters == 400 * 32 + 32 + 32 * 3 + 3 + 4 * 4 + 4
    with pytest.raises(UserError) as error:
        check_model("own_code:unused_parameters", **shape, syncs=("scratch", "ddp"))
    assert str(error.value).startswith(
        "--model own_code:unused_parameters: its parameters spare.weight, spare.bias get no "
        "gradient from the loss, and --sync ddp (torch's DistributedDataParallel) waits for "
        "every one and fails the step; choose another --sync")


def test_a_builder_without_input_shape_gets_the_classes_alone():
    """torchvision's models take num_classes and no image shape: called with the
    classes alone; a data set of other channels than its stem's is one line."""
    assert check_model("torchvision.models:resnet18", num_classes=5,
                       input_shape=(3, 32, 32)).parameters == 11_179_077
    with pytest.raises(UserError, match=r"expected input\[2, 1, 28, 28\] to have 3 channels"):
        check_model("torchvision.models:resnet18", num_classes=10, input_shape=(1, 28, 28))


def test_a_builder_that_names_input_shape_shows_its_own_error():
    """Not retried without the shape: the error was the builder's own, which a
    retry hid behind "missing 1 required positional argument: 'input_shape'"."""
    with pytest.raises(UserError) as error:
        check_model("own_code:passes_the_shape_on", num_classes=2, input_shape=(1, 20, 20))
    assert "unexpected keyword argument 'input_shape'" in str(error.value)
    assert "missing 1 required positional argument" not in str(error.value)
    # A builder of the classes alone is called so from the start.
    facts = check_model("own_code:classes_only", num_classes=2, input_shape=(1, 20, 20))
    assert facts.parameters == 802


def test_lenet_on_images_too_small_for_it_is_one_line():
    with pytest.raises(UserError, match="LeNet needs images of at least 12x12 pixels, got 8x8"):
        check_model("lenet", num_classes=2, input_shape=(1, 8, 8))


def test_a_data_set_function_of_arrays_and_tensors():
    facts = datasets.facts("own_code:grey_pairs")
    assert (facts.train_size, facts.test_size, facts.input_shape, facts.num_classes) == (
        96, 30, (1, 20, 20), 3)
    images = datasets.load("own_code:grey_pairs", train_limit=64, test_limit=10)
    assert images.train_images.shape == (64, 20, 20) and images.train_images.dtype == np.uint8
    assert images.train_labels.dtype == np.int64 and images.test_labels.shape == (10,)
    # uint8 pixels are scaled as ToTensor does, and gain their channel axis.
    x = to_model_input(torch.from_numpy(images.train_images[:2]))
    assert x.shape == (2, 1, 20, 20) and x.max() <= 1


def test_a_data_set_function_of_map_style_datasets():
    facts = datasets.facts("own_code:colour_datasets")
    assert (facts.train_size, facts.input_shape, facts.num_classes) == (40, (3, 16, 16), 5)
    images = datasets.load("own_code:colour_datasets")
    assert images.train_images.dtype == np.float32
    # Values other than uint8 pixels are taken as they are.
    x = torch.from_numpy(images.test_images[:2])
    assert torch.equal(to_model_input(x), x)


@pytest.mark.reliability(fault="--dataset: bad data", lost="nothing")
@pytest.mark.parametrize("spec, fragment", [
    ("own_code:shapes_differ", "train images are 1x20x20 but test images 1x24x24"),
    ("own_code:labels_short", "8 train images but labels of shape (7,)"),
    ("own_code:negative_labels", "a train label is -1; classes are numbered from 0"),
    ("own_code:one_class", "every label is 0; a classifier needs two classes"),
    ("own_code:one_class_of_three", "every label is 3; a classifier needs two classes"),
    ("own_code:stray_label", "labels go up to 1000000000 but take 3 values"),
    ("own_code:channels_last", "(8, 28, 28, 3), which looks N x H x W x C"),
    ("own_code:not_finite", "train images hold values that are not finite"),
    ("own_code:not_a_pair", "returned list; expected (train, test)"),
    ("own_code:nothing_here", "own_code has no nothing_here"),
    ("/no/such/folder", "no such folder"),
])
def test_bad_data_is_one_line(spec, fragment):
    with pytest.raises(UserError) as error:
        datasets.facts(spec)
    assert fragment in str(error.value)
    assert "\n" not in str(error.value)


def _image_folder(root: Path, sizes: dict[str, list[tuple[int, int]]], mode: str = "L") -> Path:
    from PIL import Image

    for split, shapes in sizes.items():
        for index, size in enumerate(shapes):
            folder = root / split / ("cat" if index % 2 else "dog")
            folder.mkdir(parents=True, exist_ok=True)
            pixels = np.full((size[1], size[0], *(() if mode == "L" else (3,))), index * 20,
                             dtype=np.uint8)
            Image.fromarray(pixels, mode).save(folder / f"{index}.png")
    return root


def test_an_image_folder_in_imagefolder_layout(tmp_path):
    grey = _image_folder(tmp_path / "grey", {"train": [(12, 14)] * 6, "test": [(12, 14)] * 4})
    facts = datasets.facts(str(grey))
    assert (facts.train_size, facts.test_size, facts.input_shape, facts.num_classes) == (
        6, 4, (1, 14, 12), 2)
    images = datasets.load(str(grey))
    assert images.train_images.dtype == np.uint8
    assert sorted(images.train_labels) == [0, 0, 0, 1, 1, 1]  # cat 0, dog 1: sorted names
    colour = _image_folder(tmp_path / "colour", {"train": [(16, 16)] * 4, "test": [(16, 16)] * 2},
                           mode="RGB")
    colour_image = colour / "train" / "dog" / "0.png"
    from PIL import Image
    Image.fromarray(np.dstack([np.zeros((16, 16), np.uint8), np.full((16, 16), 9, np.uint8),
                               np.zeros((16, 16), np.uint8)]), "RGB").save(colour_image)
    assert datasets.facts(str(colour)).input_shape == (3, 16, 16)


@pytest.mark.reliability(fault="--dataset: a bad image folder", lost="nothing")
def test_a_bad_image_folder_is_one_line(tmp_path):
    cases = {
        "sizes": ({"train": [(12, 12), (12, 12), (10, 12)], "test": [(12, 12)] * 2},
                  "every image must be of one size"),
        "no-test": ({"train": [(12, 12)] * 2}, "no test subfolder"),
        "one-class": ({"train": [(12, 12)], "test": [(12, 12)]}, "1 class folder"),
    }
    for name, (sizes, fragment) in cases.items():
        root = _image_folder(tmp_path / name, sizes)
        with pytest.raises(UserError) as error:
            datasets.facts(str(root))
        assert fragment in str(error.value), (name, str(error.value))
    extra = _image_folder(tmp_path / "extra", {"train": [(12, 12)] * 2, "test": [(12, 12)] * 2})
    shutil.copytree(extra / "test" / "dog", extra / "test" / "bird")
    with pytest.raises(UserError, match="test/ has classes that train/ lacks: bird"):
        datasets.facts(str(extra))


def test_a_folder_is_mixed_so_a_subset_holds_its_classes_and_a_subset_of_one_is_refused(
        tmp_path):
    """A folder is read class by class: the first images of a --train-limit were
    one class's (a perfect score on "cats"). Its splits are shuffled once, in a
    fixed order; data of the user's own that come sorted are refused when the
    subset holds one class."""
    root = _image_folder(tmp_path / "mixed", {"train": [(8, 8)] * 12, "test": [(8, 8)] * 8})
    first = datasets.load(str(root), train_limit=6, test_limit=4)
    assert set(first.train_labels) == {0, 1} and set(first.test_labels) == {0, 1}
    datasets._load_whole.cache_clear()
    again = datasets.load(str(root), train_limit=6, test_limit=4)
    assert np.array_equal(again.train_labels, first.train_labels)  # the same order each time
    with pytest.raises(UserError, match="the first 4 training images .* are all of class 0"):
        datasets.load("own_code:sorted_by_class", train_limit=4)
    assert len(datasets.load("own_code:sorted_by_class", train_limit=5).train_labels) == 5


def test_a_folder_of_nested_empty_or_16_bit_class_folders(tmp_path):
    from PIL import Image

    root = _image_folder(tmp_path / "nested", {"train": [(8, 8)] * 4, "test": [(8, 8)] * 2})
    (root / "train" / "cat" / "more").mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8), "L").save(root / "train" / "cat" / "more" / "x.png")
    assert datasets.facts(str(root)).train_size == 5  # as torchvision walks the tree
    (root / "train" / "zebra").mkdir()
    datasets._load_whole.cache_clear()  # read once per driver: the folder changed
    with pytest.raises(UserError, match="train/zebra holds no images"):
        datasets.facts(str(root))
    wide = _image_folder(tmp_path / "wide", {"train": [(8, 8)] * 4, "test": [(8, 8)] * 2})
    Image.fromarray(np.full((8, 8), 40000, np.uint16)).save(wide / "train" / "dog" / "0.png")
    with pytest.raises(UserError, match=r"more than 8 bits a channel \(PIL mode I;16"):
        datasets.facts(str(wide))


def test_the_run_is_told_its_data_sets_facts():
    sweep = SweepConfig.from_dict({"model": "own_code:mlp", "dataset": "own_code:grey_pairs",
                                   "batch_sizes": [32], "train_limit": 64},
                                  facts_of=lambda dataset: data_facts(dataset, None))
    train = sweep.grid[0].train
    assert (train.num_train_examples, train.num_test_examples, train.steps_per_epoch) == (64, 30, 2)
    assert (train.input_shape, train.num_classes) == ((1, 20, 20), 3)
    assert not train.is_book_model and not train.is_book_recipe
    # Only the data set sets them: no option, and sweep.json does not keep them.
    assert "num_classes" not in sweep.to_dict()
    with pytest.raises(UserError, match="train limit 100 is larger than the 96 training images"):
        SweepConfig.from_dict({"dataset": "own_code:grey_pairs", "batch_sizes": [32],
                               "train_limit": 100},
                              facts_of=lambda dataset: data_facts(dataset, None))
    with pytest.raises(UserError, match="unknown option"):
        SweepConfig.from_dict({"num_classes": 3})


def test_quick_subsets_are_no_larger_than_the_users_data_set(tmp_path):
    from orchestrator.config import cli
    from orchestrator.driver import checks

    args = cli.sweep_parser("").parse_args([
        "--quick", "--model", "own_code:mlp", "--dataset", "own_code:grey_pairs",
        "--batch-size", "32", "--out", str(tmp_path / "out")])
    base = checks.sweep_request(args).sweep.base
    assert (base.num_train_examples, base.num_test_examples, base.num_epochs) == (96, 30, 3)
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability(fault="train.py/sweep.py: a bad model or data reference", lost="nothing")
@pytest.mark.parametrize("script, args, fragment", [
    ("train.py", ["--model", "examples.own_model:nope"], "examples.own_model has no nope"),
    ("train.py", ["--model", "not a reference"], "unknown model 'not a reference'"),
    ("sweep.py", ["--model", "no_such_package.models:cnn"], "cannot import no_such_package"),
    ("sweep.py", ["--dataset", "/no/such/folder"], "no such folder"),
    ("sweep.py", ["--dataset", "own_code:grey_pairs", "--data-dir", "/tmp"],
     "--data-dir is where Fashion-MNIST's files are"),
    ("train.py", ["--model", "own_code:mlp", "--check-equivalence"],
     "--check-equivalence compares k workers with one device"),
    ("sweep.py", ["--preset", "exercises", "--model", "own_code:mlp"],
     "the exercises study answers the book's exercises, about its own networks"),
    # 96 training images and the default batch of 256: not 'evaluations per epoch'.
    ("train.py", ["--model", "own_code:mlp", "--dataset", "own_code:grey_pairs"],
     "the global batch 256 is larger than the 96 training images of own_code:grey_pairs"),
    ("sweep.py", ["--model", "own_code:unused_parameters", "--dataset", "own_code:grey_pairs",
                  "--batch-size", "32", "--sync", "scratch,ddp"],
     "its parameters spare.weight, spare.bias get no gradient from the loss"),
])
def test_a_bad_reference_is_one_line_and_exit_2_in_seconds(script, args, fragment, tmp_path):
    started = time.monotonic()
    out = ["--out", str(tmp_path / "out")] if script == "sweep.py" else []
    run = run_main(script, *args, *out)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stdout == ""
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - started < hang_limit(30)


def test_the_users_modules_ship_with_an_attached_job(monkeypatch):
    monkeypatch.delenv(job_env.RAY_JOB_CONFIG_ENV_VAR, raising=False)
    monkeypatch.delenv(job_env.SHIP_CODE_ENV_VAR, raising=False)
    config = TrainConfig(model="examples.own_model:cnn", dataset="own_code:grey_pairs")
    shipped = job_env.user_code(config)
    assert shipped == (REPO / "examples", Path(__file__).with_name("own_code.py"))
    assert job_env.attached_runtime_env({}, shipped)["py_modules"] == [
        str(job_env.PACKAGE_DIR), str(REPO / "examples"),
        str(Path(__file__).with_name("own_code.py"))]
    # The book's model and data set: nothing of the user's to ship.
    assert job_env.user_code(TrainConfig()) == ()
    # Submitted with a working directory that holds the user's code: it travels with the job.
    monkeypatch.setenv(job_env.RAY_JOB_CONFIG_ENV_VAR, json.dumps(
        {"runtime_env": {"working_dir": "."}, "metadata": {}}))
    monkeypatch.chdir(REPO)
    assert job_env.attached_runtime_env({}, shipped) == {"env_vars": {}}


def _state(model: nn.Module) -> dict:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_the_equivalence_verdict_names_the_layers_that_differ():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 2))
    initial = _state(model)
    one = {name: tensor + 0.1 if tensor.is_floating_point() else tensor + 4
           for name, tensor in initial.items()}
    # Round-off of another summation order: agree.
    same = {name: tensor * (1 + 1e-14) if tensor.is_floating_point() else tensor
            for name, tensor in one.items()}
    verdict = equivalence.compare(model, initial, one, same, steps=4, precision="fp64")
    assert verdict.agree and verdict.largest < 1e-12
    assert verdict.batch_layers == ("1 (BatchNorm2d)",)
    assert verdict.line(2).startswith("equivalence: agree. 2 workers and 1 device after 4 steps")
    # The shard's statistics: BatchNorm's buffers and what comes after differ.
    shard = {**same, "1.running_mean": one["1.running_mean"] + 0.05,
             "3.weight": one["3.weight"] + 0.01}
    verdict = equivalence.compare(model, initial, one, shard, steps=4, precision="fp64")
    assert not verdict.agree
    assert verdict.differing == ("1 (BatchNorm2d)", "3 (Linear)")
    line = verdict.line(2)
    assert line.startswith("equivalence: differ: 1 (BatchNorm2d), 3 (Linear). ")
    assert "2 of 9 tensors differ" in line and "BatchNorm normalises by each worker's shard" in line
    # Synchronised, BatchNorm is no suspect.
    assert equivalence.compare(model, initial, one, shard, steps=4, precision="fp64",
                               sync_batchnorm=True).batch_layers == ()
    # Unless in micro-batches: synchronised or not, it normalises by each of them, and
    # --sync-batchnorm alone is no way out.
    line = equivalence.compare(model, initial, one, shard, steps=4, precision="fp64",
                               micro_batches=4).line(2)
    assert ("(BatchNorm normalises by each micro-batch of --accumulation-steps 4, "
            "synchronised or not: --accumulation-steps 1 with --sync-batchnorm on GPU workers, "
            "or GroupNorm/LayerNorm;") in line


def test_the_check_runs_the_users_run_short_in_fp64():
    config = TrainConfig(model="own_code:mlp", num_workers=2, global_batch_size=64,
                         precision="bf16", num_epochs=5, train_size=96, test_size=30,
                         input_shape=(1, 20, 20), num_classes=3, sync="ddp")
    check = equivalence.check_config(config)
    assert (check.precision, check.num_epochs, check.steps_per_epoch, check.sync) == (
        "fp64", 1, 1, "ddp")
    assert check.memory_format == "nchw" and check.max_failures == 0
    # On GPUs, fp32 as IEEE's: TF32 rounds to 10 bits. (CPUs have no TF32 to turn off.)
    assert check.tf32 and not equivalence.check_config(
        dataclasses.replace(config, use_gpu=True)).tf32
    with pytest.raises(UserError, match=r"^--no-tf32 is for GPU workers: "):
        dataclasses.replace(config, tf32=False)


def test_a_sweep_of_a_model_not_the_books_answers_the_questions_of_any_model():
    """The recorded sweep of examples/own_model.py (1 and 2 workers, 2 epochs; its
    README): the report's answers are the generic ones, each speedup the ratio of
    the epoch times printed beside it, the forecast a labelled what-if."""
    trials = pd.read_csv(RECORDED / "trials.csv")
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    calibration = json.loads((RECORDED / "calibration.json").read_text())
    answers = sheet.build(trials, epochs, calibration, data_note="", use_gpu=False).answers
    assert "### 13.5.1" not in answers
    assert "this sweep trained `examples.own_model:cnn` on `examples.own_model:tops`" in answers
    for title in ("How many workers are worth it", "Which sync strategy",
                  "Which learning rate at each worker count", "What more workers would give"):
        assert f"### {title}" in answers
    assert "a what-if beyond the worker counts measured here (1, 2)" in answers
    table = answers.split("### How many workers are worth it")[1].split("\n\n")[1]
    header, _, *lines = table.splitlines()
    columns = header.strip("| ").split(" | ")
    rows = pd.DataFrame([line.strip("| ").split(" | ") for line in lines], columns=columns)
    assert sorted(rows["sync"]) == ["bucketed", "bucketed", "scratch", "scratch"]
    for _, pair in rows.groupby("sync"):
        one, many = (pair[pair["num_workers"] == k].iloc[0] for k in ("1", "2"))
        assert float(many["speedup"]) == pytest.approx(
            float(one["epoch_s"]) / float(many["epoch_s"]), rel=0.01)
    assert ("With sync bucketed, global batch 256, lr 0.2: 2 workers (0.632 s/epoch, 1 seed) "
            "are 1.82x faster than 1 (1.15 s)") in answers
    # Scratch's and bucketed's 1-worker trials are the same work (no sync at one
    # worker): 1.32 and 1.15 s, the sweep's time noise (the slowest over the fastest).
    assert ("varied by up to 14% in epoch time (the slowest over the fastest, as every "
            "\"apart\" below), over 1 group of 2 trials") in answers
    assert "within noise (1.3% apart, noise 14%) of scratch" in answers


def test_more_workers_whose_runs_did_not_learn_are_not_compared_on_accuracy():
    """A run that does not learn is a failure, not an accuracy: the recorded sweep with
    every trial's final training loss far above a uniform guess's (stuck, or diverged)."""
    trials = pd.read_csv(RECORDED / "trials.csv").assign(final_train_loss=50.0)
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    answers = sheet.build(trials, epochs, json.loads((RECORDED / "calibration.json").read_text()),
                          data_note="", use_gpu=False).answers
    assert ("Its final test accuracy says nothing of the workers: no seed learned (1 seed, "
            "which did not learn at 2 workers; 1 seed, which did not learn at 1 worker")\
        in answers
    assert "Its final test accuracy is within noise" not in answers


def test_workers_that_did_not_pay_beyond_the_noise_are_said_so():
    trials = pd.read_csv(RECORDED / "trials.csv")
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    # Every 2-worker epoch as long as its strategy's 1-worker one.
    alone = epochs[epochs["num_workers"] == 1].set_index(["sync", "epoch"])["epoch_time_s"]
    pairs = epochs["num_workers"] == 2
    epochs.loc[pairs, "epoch_time_s"] = [alone[(sync, epoch)] for sync, epoch in
                                         zip(epochs.loc[pairs, "sync"], epochs.loc[pairs, "epoch"])]
    calibration = json.loads((RECORDED / "calibration.json").read_text())
    answers = sheet.build(trials, epochs, calibration, data_note="", use_gpu=False).answers
    assert answers.count("More workers did not pay beyond the noise here.") == 2
    assert "More workers paid up to" not in answers


def test_a_models_workers_that_shared_one_gpu_are_not_timed_against_one():
    """A review (2026-11-29): with `--gpus-per-worker 0.5` on one GPU, the own-model
    sheet read "2 workers are 1.82x faster than 1" from workers taking turns on it.
    The recorded sweep's 2-worker trials stand in, marked as sharing one GPU."""
    trials = pd.read_csv(RECORDED / "trials.csv")
    epochs = pd.read_csv(RECORDED / "epochs.csv")
    calibration = json.loads((RECORDED / "calibration.json").read_text())
    several = trials["num_workers"] > 1
    trials.loc[several, "shared_gpu"] = True
    trials.loc[several, ["speedup", "efficiency"]] = float("nan")
    answers = sheet.build(trials, epochs, calibration, data_note="", use_gpu=True).answers
    assert answers.count("The 2-worker trials shared one GPU") == 1
    assert "faster than 1" not in answers and "More workers paid" not in answers
    assert ("2 workers (0.632 s/epoch, 1 seed) shared one GPU, so are not timed against 1. "
            "Whether more workers pay, workers sharing one GPU cannot tell.") in answers


def test_the_modules_a_file_imports_beside_it_ship_with_it(tmp_path, monkeypatch):
    """A review (2026-12-01): `--model sibnet:build` shipped sibnet.py alone, and a
    worker on a node without the user's folder could not run its `from siblayers
    import Block`, though the driver, run from that folder, could. What it imports
    from beside it ships too, a function's own imports and their imports included;
    what it does not import, and what is installed, stays (a review: the first
    version shipped an imported name's folder of logs, and raised on a lock file)."""
    (tmp_path / "sibnet.py").write_text(
        "from torch import nn\nfrom siblayers import Block\n\n\n"
        "def build(num_classes, input_shape):\n    import siblazy  # noqa: F401\n"
        "    return nn.Sequential(Block(), nn.Flatten(), nn.LazyLinear(num_classes))\n\n\n"
        "def logged():\n    import siblogs  # noqa: F401\n")
    (tmp_path / "siblayers.py").write_text(
        "from torch import nn\nimport sibdeep.inner  # noqa: F401\n\n\n"
        "class Block(nn.Identity):\n    pass\n")
    (tmp_path / "sibdeep").mkdir()
    (tmp_path / "sibdeep" / "__init__.py").write_text("")
    (tmp_path / "sibdeep" / "inner.py").write_text("import sibnet  # noqa: F401\n")
    (tmp_path / "siblazy.py").write_text("")
    (tmp_path / "sibunused.py").write_text("")
    # A folder without __init__.py (wandb's run logs), which an installed package
    # of its name outranks; an editor's lock file, a link to nothing.
    (tmp_path / "siblogs").mkdir()
    (tmp_path / "sibdeep" / ".#inner.py").symlink_to(tmp_path / "gone")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(job_env.RAY_JOB_CONFIG_ENV_VAR, raising=False)
    monkeypatch.delenv(job_env.SHIP_CODE_ENV_VAR, raising=False)
    assert job_env.user_code(TrainConfig(model="sibnet:build")) == (
        tmp_path / "sibnet.py", tmp_path / "siblayers.py", tmp_path / "siblazy.py",
        tmp_path / "sibdeep")
