"""The scaling sweep: Ray Tune over workers x batch size x learning rate, then a report.

    python experiments/sweep.py                     # the book's 13.5: LeNet, 1 and 2 workers
    python experiments/sweep.py --preset scaling    # the exercises: workers x batch x lr
    python experiments/sweep.py --preset d2l-13.6   # ResNet-18, meant for a GPU cluster
    python experiments/sweep.py --workers 1,2 --batch-size 256,512 --lr 0.05,0.1 --out results/run1

The same command as `d2l-sweep` once the package is installed; it lives in
orchestrator/driver/commands.py. Writes trials.csv, epochs.csv, report.md and
plots into --out; `--help` lists the options.
"""

import sys

from orchestrator.driver.commands import sweep_main

if __name__ == "__main__":
    sys.exit(sweep_main())
