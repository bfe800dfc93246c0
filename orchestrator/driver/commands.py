"""The two commands, `d2l-train` and `d2l-sweep` (experiments/train.py and
experiments/sweep.py in a checkout): parse the command line, run a job, print
its outcome, return the exit status.

Only config is imported before the arguments are checked; jobs.py imports
torch and Ray Train and Tune once they are, so a typo exits 2 in a second.
Each `main`'s docstring is its usage text; its first line the `--help` title.
"""

import functools
import sys

from orchestrator.config import cli
from orchestrator.driver import jobs
from orchestrator.driver.sweep_files import RESUME_HINT
from orchestrator.records import counted

EXIT_TRAINING_FAILED = 1
EXIT_TRIALS_FAILED = 1
EXIT_INTERRUPTED = 130  # the shell's code for a Ctrl-C
# A Ctrl-C outside the windows where a job says what it kept: the imports, Ray's
# start, the checks before anything is written (one in Ray's shutdown after the
# job is held until it ends: jobs.shut_down).
INTERRUPTED_LINE = "interrupted (Ctrl-C)"


def exits_130_on_ctrl_c(main):
    """A KeyboardInterrupt that the job did not turn into its own line (one it
    raised outside those windows) is INTERRUPTED_LINE and exit 130, not a traceback."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            print(INTERRUPTED_LINE, file=sys.stderr)
            return EXIT_INTERRUPTED
    return wrapper


@cli.exits_2_on_user_error
@exits_130_on_ctrl_c
def train_main(argv: list[str] | None = None) -> int:
    """One data-parallel training run of the book's 13.5 / 13.6 on Ray Train workers.

        d2l-train --model lenet --workers 2 --batch-size 256 --lr 0.2 --epochs 10

    Prints one line per epoch and ends with the book's line, for example
    `test acc: 0.84, 3.1 sec/epoch on 2 workers [cpu, cpu]`. `--help` lists the
    options; each is a field of orchestrator.config.options.TrainConfig.
    """
    args = cli.train_parser(_title(train_main)).parse_args(argv)
    outcome = jobs.train(args)  # a Ctrl-C before its fit: exit 130
    print(outcome.final_line, file=sys.stderr if outcome.failed else sys.stdout)
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_TRAINING_FAILED if outcome.failed else 0


@cli.exits_2_on_user_error
@exits_130_on_ctrl_c
def sweep_main(argv: list[str] | None = None) -> int:
    """The scaling sweep: Ray Tune over workers x batch size x learning rate, then a report.

        d2l-sweep                     # the book's 13.5 experiment: LeNet, 1 and 2 workers
        d2l-sweep --preset scaling    # the exercises: workers x batch x lr
        d2l-sweep --preset d2l-13.6   # ResNet-18, meant for a GPU cluster
        d2l-sweep --workers 1,2 --batch-size 256,512 --lr 0.05,0.1 --out results/run1
        d2l-sweep --preset exercises --dry-run   # the trials, fitted to the cluster; no run

    Writes trials.csv, epochs.csv, report.md and plots into --out. `--help` lists
    the options; each is a field of orchestrator.config.options.TrainConfig or
    orchestrator.config.grid.SweepConfig.
    """
    args = cli.sweep_parser(_title(sweep_main)).parse_args(argv)
    outcome = jobs.sweep(args)  # a Ctrl-C before its folder is claimed: exit 130
    if outcome.stopped_line:
        print("\n" + outcome.stopped_line, file=sys.stderr)
        return EXIT_INTERRUPTED if outcome.interrupted else EXIT_TRIALS_FAILED
    if outcome.dry_run:
        print(jobs.DRY_RUN_LINE)
        return 0
    print("\n" + outcome.tables)
    print("\nResults:\n" + "\n".join(f"  {path}" for path in outcome.paths))
    if outcome.interrupted:
        print(f"\nThe sweep was interrupted: {RESUME_HINT}.", file=sys.stderr)
        return EXIT_INTERRUPTED
    if outcome.failed_trials:
        # The other trials' results are written; the exit status still tells
        # a script (or `ray job submit`) that the sweep is not whole.
        print("\n" + failed_trials_text(outcome.failed_trials), file=sys.stderr)
        return EXIT_TRIALS_FAILED
    return 0


def failed_trials_text(failed_trials: dict[str, str], most: int = 5) -> str:
    """`1 trial failed: <id>: <error>`; with errors that differ, a line each after
    the trials that raised it, the first `most` of them (trials.csv has them all)."""
    trials_by_error: dict[str, list[str]] = {}
    for trial, error in failed_trials.items():
        trials_by_error.setdefault(error, []).append(trial)
    head = f"{counted(len(failed_trials), 'trial')} failed:"
    lines = [f"{', '.join(trials)}: {error}" for error, trials in trials_by_error.items()]
    if len(lines) == 1:
        return f"{head} {lines[0]}"
    more = len(lines) - most
    return "\n  ".join([head, *lines[:most]] + (
        [f"and {counted(more, 'other error')}: the error column of trials.csv"]
        if more > 0 else []))


def _title(main) -> str:
    return main.__doc__.split("\n")[0]
