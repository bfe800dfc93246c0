"""One data-parallel training run of the book's 13.5 / 13.6 on Ray Train workers.

    python experiments/train.py --model lenet --workers 2 --batch-size 256 --lr 0.2 --epochs 10

Prints one line per epoch and ends with the book's line, for example
`test acc: 0.84, 3.1 sec/epoch on 2 workers [cpu, cpu]`. `--help` lists the
options; each is a field of orchestrator.config.options.TrainConfig.
"""

import sys

from orchestrator.config import cli
from orchestrator.driver import jobs

EXIT_TRAINING_FAILED = 1


@cli.exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = cli.train_parser(__doc__.split("\n")[0]).parse_args(argv)
    outcome = jobs.train(args)
    print(outcome.final_line, file=sys.stderr if outcome.failed else sys.stdout)
    return EXIT_TRAINING_FAILED if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
