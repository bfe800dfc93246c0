"""A grid point the cluster could not hold, estimated as a what-if on named links
from the sweep's 1-worker trial of its model (step_baseline.py): what report.md's
"Not run" section prints beside each point left out. No Ray or torch here.
"""

import pandas as pd

from orchestrator.config.dataset import even_shares
from orchestrator.records import LeftOut
from orchestrator.report.costs import INTERCONNECTS, P2_16XLARGE
from orchestrator.report.step_baseline import baseline_candidates, baseline_costs, step_s


# The named links a point left out is estimated on: GPU workers as the book's
# p2.16xlarge and an NVLink node join them, CPU workers as nodes on Ethernet.
WHAT_IF_LINKS = {True: (P2_16XLARGE, INTERCONNECTS[2]), False: INTERCONNECTS[:2]}


def what_if(summary: pd.DataFrame, epochs: pd.DataFrame, calibration: dict | None,
            cell: LeftOut, use_gpu: bool) -> list[dict]:
    """A point the cluster could not hold, estimated from
    the sweep's 1-worker trial of its model, sync, precision and threads (the
    closest global batch, then lr) and the calibration's gradient bytes: per named link, its
    epoch seconds and speedup over the model's own 1-worker epoch, each worker
    on a device of its own (contention 1). [] without such a trial or bytes."""
    if not calibration or "gradient_bytes" not in calibration:
        return []
    singles = baseline_candidates(summary, epochs)
    same = (singles[["model", "sync", "precision", "threads_per_worker"]]
            == [cell.model, cell.sync, cell.precision, cell.threads_per_worker])
    singles = singles[same.all(axis=1)]
    if singles.empty:
        return []
    # The closest global batch, then the closest lr.
    distance = pd.DataFrame({"batch": (singles["global_batch_size"]
                                       - cell.global_batch_size).abs(),
                             "lr": (singles["lr"] - cell.lr).abs()})
    single = singles.loc[distance.sort_values(["batch", "lr"]).index[0]]
    try:
        baseline = baseline_costs(single.to_frame().T, epochs, calibration)
    except KeyError:  # no gradient bytes recorded for its layout
        return []
    batch, steps = int(single["global_batch_size"]), int(single["steps_per_epoch"])
    num_workers, global_batch = cell.num_workers, cell.global_batch_size
    largest_shard = max(even_shares(global_batch, num_workers))
    # The same examples an epoch: fewer, larger steps with a larger global batch.
    one_s = steps * (baseline.compute_s(batch) + baseline.other_s)
    rows = []
    for link in WHAT_IF_LINKS[use_gpu]:
        epoch_s = steps * batch / global_batch * sum(
            step_s(baseline, link, num_workers, largest_shard, 1.0))
        rows.append({"link": link.name, "epoch_s": epoch_s, "speedup": one_s / epoch_s,
                     "baseline_trial": single["trial_id"],
                     "baseline_epoch_s": baseline.epoch_s})
    return rows
