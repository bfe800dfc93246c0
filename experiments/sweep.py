"""The scaling sweep: Ray Tune over workers x batch size x learning rate, then a report.

    python experiments/sweep.py                     # the book's 13.5 experiment: LeNet, 1 and 2 workers
    python experiments/sweep.py --preset scaling    # the exercises: workers x batch x lr
    python experiments/sweep.py --preset d2l-13.6   # ResNet-18, meant for a GPU cluster
    python experiments/sweep.py --workers 1,2 --batch-size 256,512 --lr 0.05,0.1 --out results/run1

Writes trials.csv, epochs.csv, report.md and plots into --out. `--help` lists
the options; each is a field of orchestrator.config.options.TrainConfig or
orchestrator.config.grid.SweepConfig.
"""

import sys

from orchestrator.config import cli
from orchestrator.driver import jobs

EXIT_TRIALS_FAILED = 1
EXIT_INTERRUPTED = 130  # the shell's code for a Ctrl-C


@cli.exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = cli.sweep_parser(__doc__.split("\n")[0]).parse_args(argv)
    outcome = jobs.sweep(args)
    print("\n" + outcome.tables)
    print("\nResults:\n" + "\n".join(f"  {path}" for path in outcome.paths))
    if outcome.interrupted:
        print("\nThe sweep was interrupted: run the same command with --resume to "
              "finish it (finished trials are kept).", file=sys.stderr)
        return EXIT_INTERRUPTED
    if outcome.failed_trials:
        # The other trials' results are written; the exit status still tells
        # a script (or `ray job submit`) that the sweep is not whole.
        print(f"\n{len(outcome.failed_trials)} trial(s) failed: "
              f"{', '.join(outcome.failed_trials)} (the error column of trials.csv says why)",
              file=sys.stderr)
        return EXIT_TRIALS_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
