"""The command line is generated from the config fields: one declaration per option."""

import dataclasses
import re

import pytest

from helpers import REPO
from orchestrator.config import cli
from orchestrator.driver import checks
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import SWEEP_FIELDS, TRAIN_FIELDS, SweepConfig


def _flags(parser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


@pytest.mark.parametrize("one_run", [True, False], ids=["train.py", "sweep.py"])
def test_every_option_field_has_its_flag(one_run):
    parser = cli.train_parser("") if one_run else cli.sweep_parser("")
    expected = {cli.flag(spec) for spec in TRAIN_FIELDS.values()}
    expected |= {cli.flag(spec) for spec in SWEEP_FIELDS.values()
                 if not (one_run and spec.name in cli.SWEEP_ONLY_FIELDS)}
    assert expected <= _flags(parser)
    assert {"--workers", "--batch-size", "--lr", "--epochs", "--no-shared-memory",
            "--max-failures"} <= _flags(parser)


def test_no_script_names_a_training_option_and_each_is_short():
    names = list(TRAIN_FIELDS)
    for script in (REPO / "experiments").glob("*.py"):
        text = script.read_text()
        assert len(text.splitlines()) <= 100, script.name
        # A flag in a usage example (`--model`) is fine; the field name in code is not.
        named = [name for name in names if re.search(rf"(?<![\w-]){name}\b", text)]
        assert not named, f"{script.name} names {named}"


def test_the_same_flags_give_the_same_run_in_both_scripts():
    argv = ["--workers", "2", "--batch-size", "128", "--batch-scaling", "per-worker", "--lr", "0.1",
            "--lr-scaling", "linear", "--epochs", "3", "--no-shared-memory", "--use-gpu", "no",
            "--train-limit", "1024"]
    run, gpu_from_cluster = checks.run_request(cli.train_parser("").parse_args(argv))
    (point,) = SweepConfig.from_dict(cli.config_options(cli.sweep_parser("").parse_args(argv)),
                                     source="").grid
    assert run == point.train and not gpu_from_cluster
    assert (run.global_batch_size, run.lr, run.shared_memory, run.use_gpu) == (256, 0.2, False, False)


def test_defaults_come_from_the_dataclass():
    run, gpu_from_cluster = checks.run_request(cli.train_parser("").parse_args([]))
    # `auto` GPU use is checked as GPU workers until the cluster says.
    assert dataclasses.replace(run, use_gpu=False) == TrainConfig() and gpu_from_cluster


def test_a_sweep_round_trips_through_its_flat_form():
    sweep = SweepConfig.from_dict({"workers": [1, 2], "lrs": [0.1, 0.3], "num_epochs": 2,
                                   "batch_scaling": "per-worker", "batch_sizes": [64],
                                   "calibrate": False})
    assert SweepConfig.from_dict(sweep.to_dict()) == sweep
    assert [point.index for point in sweep.grid] == [0, 1, 2, 3]
    assert [point.train.global_batch_size for point in sweep.grid] == [64, 64, 128, 128]
