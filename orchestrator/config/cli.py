"""The command line of both scripts, generated from the config dataclasses' fields.

An option exists once, as a field of `TrainConfig` or `SweepConfig`; this
module turns each into a flag. Every generated option defaults to "not
given" (argparse.SUPPRESS), so what a user typed can be told from a preset's
or a field's default. User mistakes end as one line on stderr and exit
status 2, before any worker starts; argparse's own errors follow the same rule.
"""

import argparse
import dataclasses
import functools
import math
import sys
import typing
from collections.abc import Callable
from typing import Literal

from orchestrator.config.grid import OPTION_FIELDS, SWEEP_FIELDS, TRAIN_FIELDS
from orchestrator.config.presets import DEFAULT_PRESET, PRESETS, QUICK, QUICK_PER_PRESET
from orchestrator.errors import UserError

EXIT_USER_ERROR = 2
# `--use-gpu auto`: decided once the cluster says whether it has GPUs.
AUTO = "auto"
_METAVARS = {int: "N", float: "X", str: "TEXT"}
# Options of a sweep's trials as Tune runs them: train.py has no Tune.
SWEEP_ONLY_FIELDS = ("scheduler", "stop_at_target", "study", "calibrate", "baseline_threads",
                     "tracking", "tracking_uri")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit status 2)."""

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def exits_2_on_user_error(main: Callable[..., int]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USER_ERROR
    return wrapper


def train_parser(description: str) -> OneLineParser:
    parser = OneLineParser(description=description)
    add_config_options(parser, one_run=True)
    parser.add_argument("--name", default=None,
                        help="run name in the Ray storage (default: model, workers and time); "
                             "the name of an earlier run resumes it from its last checkpoint")
    parser.add_argument("--check-equivalence", action="store_true",
                        help="instead of training: run a few steps on --workers and on one "
                             "device with the same global batch (fp64) and say whether the "
                             "parameters agree, naming the layers that differ (exit 1)")
    add_cluster_options(parser)
    return parser


def sweep_parser(description: str) -> OneLineParser:
    parser = OneLineParser(description=description)
    parser.add_argument("--config", metavar="FILE",
                        help="a JSON file of sweep options instead of a preset and the options "
                             "below (a previous sweep's sweep.json works too)")
    parser.add_argument("--preset", default=argparse.SUPPRESS,
                        help=f"starting point for the grid: {', '.join(PRESETS)} "
                             f"(default {DEFAULT_PRESET}); the options below override it")
    parser.add_argument("--quick", action="store_true",
                        help="the preset reduced to data subsets and fewer epochs: "
                             + ", ".join(f"{name} {value}" for name, value in QUICK.items())
                             + "".join(f"; {preset}: also " + ", ".join(
                                 f"{name} {value}" for name, value in extra.items()
                                 if name not in QUICK) for preset, extra in QUICK_PER_PRESET.items()))
    add_config_options(parser, one_run=False)
    parser.add_argument("--repeats", type=int, default=None, metavar="N",
                        help="run every grid point N times, with seeds 0 to N-1: shorthand "
                             "for --seed 0,1,...,N-1")
    parser.add_argument("--out", default=None,
                        help="results folder (default: results/<preset or config file>-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted sweep in --out: finished trials are kept")
    parser.add_argument("--max-concurrent-trials", type=int, default=None,
                        help="default: one at a time when the sweep reports a speedup (trials "
                             "that share a node crowd each other's timings), else as many of the "
                             "largest trial as the cluster holds")
    parser.add_argument("--max-hours", type=float, default=None, metavar="X",
                        help="stop the sweep once the time spent plus its estimated time left, "
                             "revised after every epoch, exceeds X hours (--resume continues it)")
    add_cluster_options(parser)
    return parser


def flag(spec: dataclasses.Field) -> str:
    """The field's flag: `--<name>`, or as its metadata says; `--no-...` to turn off a default on."""
    name = spec.metadata["flag"] or "--" + spec.name.replace("_", "-")
    if spec.type is bool and spec.default and not spec.metadata["auto"]:
        return name.replace("--", "--no-", 1)
    return name


def add_config_options(parser: argparse.ArgumentParser, *, one_run: bool) -> None:
    """A flag for every option of a run and of a sweep's grid.

    `one_run` (train.py): each axis takes one value and the SWEEP_ONLY_FIELDS
    are left out; `--batch-size` means the same in both scripts.
    """
    training = parser.add_argument_group("training (one value each)")
    for spec in TRAIN_FIELDS.values():
        _add_field(training, spec, validated_by_config=True, one_run=one_run)
    grid = parser.add_argument_group("grid" if one_run else "grid (comma-separated lists)")
    for spec in SWEEP_FIELDS.values():
        if one_run and spec.name in SWEEP_ONLY_FIELDS:
            continue
        if typing.get_origin(spec.type) is tuple:
            item_type = typing.get_args(spec.type)[0]
            metavar = ("{" + ",".join(typing.get_args(item_type)) + "}"
                       if typing.get_origin(item_type) is Literal else _METAVARS[item_type])
            grid.add_argument(flag(spec), dest=spec.name, default=argparse.SUPPRESS,
                              metavar=metavar + ("" if one_run else ",..."),
                              type=_one_value(item_type) if one_run else _list_of(item_type),
                              help=f"{spec.metadata['doc']} ({_default(spec, one_run)})")
        else:
            _add_field(grid, spec, validated_by_config=False, one_run=one_run)


def _add_field(group, spec: dataclasses.Field, *, validated_by_config: bool,
               one_run: bool) -> None:
    doc, name = spec.metadata["doc"], spec.name
    if spec.metadata["auto"]:
        group.add_argument(flag(spec), dest=name, choices=(AUTO, "yes", "no"),
                           default=argparse.SUPPRESS, help=f"{doc} (default {AUTO})")
    elif spec.type is bool and spec.default:
        group.add_argument(flag(spec), dest=name, action="store_false",
                           default=argparse.SUPPRESS, help=f"off: {doc}")
    elif spec.type is bool:
        group.add_argument(flag(spec), dest=name, action="store_true", default=argparse.SUPPRESS,
                           help=doc)
    elif typing.get_origin(spec.type) is Literal:
        choices = typing.get_args(spec.type)
        # A run's choices are checked by TrainConfig, in its one-line words.
        group.add_argument(flag(spec), dest=name, default=argparse.SUPPRESS,
                           choices=None if validated_by_config else choices,
                           metavar="{" + ",".join(choices) + "}",
                           help=f"{doc} ({_default(spec, one_run)})")
    else:
        kind = next(arg for arg in typing.get_args(spec.type) or (spec.type,) if arg is not type(None))
        group.add_argument(flag(spec), dest=name, type=kind, default=argparse.SUPPRESS,
                           metavar=_METAVARS[kind], help=f"{doc} ({_default(spec, one_run)})")


def config_options(args: argparse.Namespace) -> dict:
    """The config options the user gave, by field name; yes/no as booleans, `auto` kept,
    `--repeats N` as the seeds 0 to N-1."""
    given = {name: value for name, value in vars(args).items() if name in OPTION_FIELDS}
    for name, value in given.items():
        if OPTION_FIELDS[name].metadata["auto"] and value != AUTO:
            given[name] = value == "yes"
    repeats = getattr(args, "repeats", None)
    if repeats is not None:
        if "seeds" in given:
            raise UserError("give --seed or --repeats, not both: --repeats N is --seed "
                            "0,1,...,N-1")
        if repeats < 1:
            raise UserError(f"--repeats must be >= 1, got {repeats}")
        given["seeds"] = tuple(range(repeats))
    return given


def given_flags(args: argparse.Namespace) -> list[str]:
    """The flags of the config options the user gave, for messages."""
    flags = [flag(OPTION_FIELDS[name]) for name in vars(args) if name in OPTION_FIELDS]
    return flags + (["--repeats"] if getattr(args, "repeats", None) is not None else [])


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster and data")
    group.add_argument("--address", default=None,
                       help="Ray cluster to attach to (host:port or auto); default: "
                            "$RAY_ADDRESS, else an embedded local Ray")
    group.add_argument("--dashboard-host", default="127.0.0.1",
                       help="interface of the embedded Ray's dashboard (default loopback only)")
    group.add_argument("--storage", default=None, metavar="PATH_OR_URI",
                       help="where Ray keeps checkpoints and results; a multi-node cluster "
                            "needs a path every node sees (NFS) or a bucket URI")
    group.add_argument("--data-dir", default=None,
                       help="folder with the four Fashion-MNIST files (default: "
                            "$FASHION_MNIST_DIR, Debian's package, torchvision's download)")
    group.add_argument("--wait-for-nodes", type=float, default=None, metavar="S",
                       help="on an attached cluster with an autoscaler (KubeRay, `ray up`): ask "
                            "it for the largest run's workers (of --use-gpu yes or no) and wait "
                            "up to S seconds for their nodes before the plan is fitted "
                            "(default: fitted to the nodes up when the job starts)")
    group.add_argument("--dry-run", action="store_true",
                       help="check the input and the data, attach to (or start) Ray, print the "
                            "plan fitted to the cluster, and stop: nothing trained or written "
                            "(with --wait-for-nodes, the nodes asked for do start)")


def _one_value(kind) -> Callable[[str], tuple]:
    if typing.get_origin(kind) is Literal:
        return lambda text: (text,)  # TrainConfig names the choices when it is not one
    def parse(text: str) -> tuple:
        if "," in text:  # a sweep's list given to one run
            raise argparse.ArgumentTypeError(
                f"{text!r}: train.py runs one configuration, one value each; sweep.py takes "
                f"comma-separated lists and runs a trial per combination")
        return (kind(text),)
    parse.__name__ = kind.__name__  # argparse names the type in its error: "invalid float value"
    return parse


def _list_of(kind) -> Callable[[str], tuple]:
    """'1,2,4' -> (1, 2, 4), with a one-line error naming the bad item.

    Choices ('scratch,ddp') are kept as text, and checked, with the names of
    the valid ones, where every grid point's TrainConfig is built.
    """
    choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else ()
    example = ",".join(choices[:2]) if choices else "1,2,4" if kind is int else "0.05,0.1"

    def parse(text: str) -> tuple:
        values = []
        for item in (item.strip() for item in text.split(",")):
            if choices:
                if not item:
                    raise argparse.ArgumentTypeError(
                        f"an empty item in {text!r} (expected a comma-separated list like "
                        f"{example})")
                values.append(item)
                continue
            try:
                value = kind(item)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise argparse.ArgumentTypeError(
                    f"{item!r} is not {what} (expected a comma-separated list like {example})")
            if kind is float and not math.isfinite(value):
                raise argparse.ArgumentTypeError(f"{item!r} is not a finite number")
            values.append(value)
        return tuple(values)
    return parse


def _default(spec: dataclasses.Field, one_run: bool) -> str:
    """How --help names a field's default: a sweep takes the preset's first."""
    default = spec.default
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    if shown is None or shown == "":  # no limit on the images; no target; no trackers
        shown = "all" if spec.name.endswith("_limit") else "none"
    if not one_run and any(spec.name in preset for preset in PRESETS.values()):
        return f"default: the preset's, else {shown}"
    return f"default {shown}"
