"""One data-parallel training run of the book's 13.5 / 13.6 on Ray Train workers.

    python experiments/train.py --model lenet --workers 2 --batch-size 256 --lr 0.2 --epochs 10

The same command as `d2l-train` once the package is installed; it lives in
orchestrator/driver/commands.py. `--help` lists the options.
"""

import sys

from orchestrator.driver.commands import train_main

if __name__ == "__main__":
    sys.exit(train_main())
