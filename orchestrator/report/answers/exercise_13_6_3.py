"""13.6.3, overlapping steps, answered from a sweep (sheet.py renders it): what
dropping the wait would do, and the delayed strategy's overlap of two steps
measured in time beside the strategies that wait for their sums, and in
accuracy beside the synchronous optimizer, with the stale gradient's price."""

import numpy as np
import pandas as pd

from orchestrator.records import Status, counted, seconds_text
from orchestrator.report.answers.cells import (at_workers, cell, none_learned, part_trials,
                                               shares_gpu, sync_seconds, timed)
from orchestrator.report.answers.compare import (accuracy_figures, accuracy_verdict,
                                                 cells_differ, cells_gap, cells_seeds,
                                                 compare_cells, compare_sync, compare_times,
                                                 gap_on, ratio_text, syncs_not_told_apart)
from orchestrator.report.answers.noise import UNTESTED_SYNC, Noise
from orchestrator.report.answers.sides import sides_of
from orchestrator.report.answers.welch import POWER, p_text
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, acc_seeds_text, in_short,
                                                 missing_part, one_worker_count, percent,
                                                 seeds_label, seeds_text)


DROPPED_WAIT = (
    "Dropping `npx.waitall()`: MXNet's engine, like PyTorch on a GPU, returns before the "
    "queued work has run, so the epoch's timer would stop once the work is queued, not done, "
    "and the next read of a result (the evaluation) would wait for it instead: epochs would "
    "look shorter without training getting faster, and the host could run ahead by a whole "
    "epoch of queued steps. 13.5's PyTorch code calls `torch.cuda.synchronize()` where "
    "MXNet's calls `npx.waitall()`; 13.6's PyTorch `train` stops its timer with neither, yet "
    "its epoch times hold nearly all the work: each step's `X.to(devices[0])`, a blocking "
    "copy, waits for the steps queued before it, so at most the last step's work is left "
    "out{measured}.")
SHORT = (
    "Without the wait the epoch's timer stops when the work is queued, not done: epochs "
    "look shorter, and training is no faster. Two steps overlap and leave SGD as it is when "
    "the host queues step t+1 while the device runs step t, and waits for step t's update to "
    "end before it queues step t+2.")
OVERLAP = (
    "An overlap of up to two steps can leave the optimizer as it is: the host queues step "
    "t+1 while the device still runs step t, and waits for step t to end (MXNet's "
    "`wait_to_read()` on a parameter step t's update wrote, not on its loss, which is ready "
    "after the forward; in PyTorch a CUDA event recorded after the optimizer's step) before "
    "it queues step t+2, so that no more than two steps are in flight. The engine runs each "
    "step after the one whose weights it reads, so this is the same synchronous SGD; what "
    "overlaps is the host's work "
    "(Python, kernel launches, the next batch's copy) with the device's, and the wait bounds "
    "what queued steps hold. Within a step, the sums can also overlap the computation "
    "without staleness: ddp launches each bucket's allreduce while backward computes the "
    "next (Li et al. 2020, 'PyTorch Distributed'), timed here beside the rest. On CPUs torch "
    "runs each operation to its end, so there is no host to overlap and this sweep does not "
    "time that first overlap. Overlapping one step's sum with the next step's computation "
    "changes the optimizer: that is `--sync delayed` (training/sync/delayed.py): step t's "
    "allreduce is launched asynchronously right after its backward, step t+1's forward and "
    "backward run while it is in flight, and step t+1 applies step t's summed gradient. That "
    "is one-step-delayed SGD, w(t+1) = w(t) - lr * g(w(t-1)) (Pipe-SGD, Li et al. 2018; "
    "PipeDream-2BW's one-step-stale weights, Narayanan et al. 2021): a different optimizer, "
    "which a test checks against a single-process reference of it, so its accuracy is measured "
    "beside the synchronous optimizer's, not assumed.")


# What the delayed arm's replicas share (they differ in the seed only).
ARM_KEYS = ["lr", "global_batch_size", "num_epochs", "warmup_epochs", "momentum", "precision",
            "split", "straggler_slowdown", "threads_per_worker"]


def answer_13_6_3(summary: pd.DataFrame, noise: Noise, use_gpu: bool = False) -> list[str]:
    dropped = DROPPED_WAIT.format(measured=(
        "; this sweep's workers are GPUs, but it times every epoch with the wait kept "
        "(torch.cuda.synchronize), so the difference is not measured here" if use_gpu else
        ". This sweep's workers are CPUs, where PyTorch runs each operation to its end before "
        "it returns (MXNet's engine queues on CPUs too): there is nothing to drop, and the "
        "effect cannot show here"))
    usable = timed(summary[summary["status"] != Status.FAILED])
    delayed = timed(part_trials(summary, "delayed"))
    delayed = delayed[delayed["sync"] == "delayed"]
    if delayed.empty:
        gap = (one_worker_count(usable) if usable["num_workers"].nunique() < 2
               else missing_part("delayed"))
        return [in_short(SHORT), dropped, f"{OVERLAP} {gap}"]
    k = int(delayed["num_workers"].max())
    if k < 2:
        return [in_short(SHORT), dropped, f"{OVERLAP} {one_worker_count(delayed)}"]
    # One configuration's replicas (a grid may run delayed at several lrs or batches):
    # the largest lr's, the synchronous optimizer's own; a smaller one is staleness's price.
    at_k = delayed[delayed["num_workers"] == k]
    first = at_k[at_k["lr"] == at_k["lr"].max()].iloc[0]
    smaller = at_k[(at_k["lr"] < first["lr"]) & (at_k["global_batch_size"]
                                                 == first["global_batch_size"])]
    delayed = delayed[np.logical_and.reduce([delayed[key] == first[key] for key in ARM_KEYS])]
    arm = at_workers(delayed, k)
    same_k = usable[(usable["num_workers"] == k)
                    & (usable["global_batch_size"] == arm["global_batch_size"])]
    sentences = [OVERLAP]
    # Time: beside the strategies that wait for their sums, on the arm's own transport.
    waiting = [(name, at_workers(same_k[(same_k["sync"] == name)
                                        & (same_k["transport"] == arm["transport"])], k))
               for name in ("bucketed", "ddp")]
    timed_beside = [f"{compare_times(arm['epoch_s'], row['epoch_s'], noise, sides_of(arm, row))} "
                    f"{name} "
                    f"({seconds_text(row['epoch_s'], 2)} s, {percent(row['sync_share'])} waiting; "
                    f"{seeds_text(row['seeds'])})" for name, row in waiting if row is not None]
    sentences.append(
        f"At {k} workers through {arm['transport'] or 'an unrecorded transport'}, delayed took "
        f"{seconds_text(arm['epoch_s'], 2)} s per epoch ({seeds_text(arm['seeds'])}), "
        f"{percent(arm['sync_share'])} of it waiting for sums"
        + (f": {'; '.join(timed_beside)}." if timed_beside else
           f"; no bucketed or ddp trial summed through the same transport at {k} workers "
           f"(`{EXERCISES_COMMAND}` runs one)."))
    bound = next((row for name, row in waiting if name == "bucketed" and row is not None), None)
    if bound is not None and shares_gpu(arm):
        sentences.append("Its workers took turns on one GPU: part of a step's wait for its sums "
                         "is the other worker's turn, which no overlap frees, so what an "
                         "overlap hides on GPUs of their own is not measured here.")
    elif bound is not None:
        # The most any overlap can save is the time a step waits for its sums.
        # What the epoch-time test calls with POWER, as 13.5.2's resolutions are read (a
        # grading: the gap it calls half the time was read as what could show).
        pair = sides_of(arm, bound)
        detectable = noise.time_detectable(pair)
        resolvable = bound["sync_share"] > detectable
        sentences.append(
            f"The most any overlap can save is the synchronous step's wait for its sums, "
            f"{percent(bound['sync_share'])} of bucketed's epoch here, against "
            f"{noise.time_noise_phrase(pair)}: " + (
                (f"the epoch-time test calls a gain with {POWER:.0%} power only from "
                 f"{percent(detectable)}, an overlap that hides more than "
                 f"{percent(detectable / bound['sync_share'])} of that wait"
                 + ("." if use_gpu else " (the wait itself is measured, and tested, below)."))
                if resolvable else
                f"this sweep would not call a gain of that size with {POWER:.0%} power, "
                f"whatever the overlap does (a gain of {percent(detectable)} it would); more "
                f"replicas (`--repeats`) or a slower link would"
                + ("." if use_gpu else "; the wait itself is measured, and tested, below.")))
    # Accuracy: beside the synchronous optimizer with everything else equal.
    synchronous = timed(part_trials(summary, "batch-global"))
    twin = at_workers(synchronous[(synchronous["global_batch_size"] == arm["global_batch_size"])
                                  & (synchronous["lr"] == arm["lr"])
                                  & (synchronous["num_epochs"] == arm["num_epochs"])
                                  & (synchronous["warmup_epochs"] == arm["warmup_epochs"])
                                  & synchronous["seed"].isin(delayed["seed"])], k)
    if twin is None:
        sentences.append(f"No synchronous trial at {k} workers shares its lr, batch, epochs and "
                         f"seeds, so its accuracy is not compared.")
    else:
        sentences.append(
            f"After {counted(arm['epochs_run'], 'epoch')} its final test accuracy was "
            f"{arm['final_test_acc']:.3f} ({acc_seeds_text(arm)}), "
            f"{compare_cells(arm, twin, noise)} the "
            f"synchronous optimizer's {twin['final_test_acc']:.3f} ({twin['sync']}, the same "
            f"lr {twin['lr']:g}, global batch {twin['global_batch_size']} and seeds; "
            f"{acc_seeds_text(twin)}).")
    sentences.append(STALENESS)
    half = at_workers(smaller, k) if not smaller.empty else None
    if half is not None:
        # The price at the tuned lr, for the smaller lr's to be read beside it.
        tuned = ((float(arm["lr"]), arm, twin)
                 if twin is not None and not none_learned(twin) and not none_learned(arm)
                 else None)
        sentences.append(_staleness_at(half, synchronous_at(summary, half), noise, tuned))
        if not (none_learned(half) or none_learned(arm)) and cells_differ(half, arm, noise) < 0:
            sentences.append(
                f"Delayed at lr {half['lr']:g} was {compare_cells(half, arm, noise)} its own "
                f"{arm['final_test_acc']:.3f} at lr {arm['lr']:g}: the smaller lr did not help "
                f"it here, so this sweep does not show it needing one.")
    if bound is not None and not use_gpu:
        waits = sync_seconds(arm), sync_seconds(bound)
        hidden = max(1 - waits[0] / waits[1], 0.0) if waits[1] > 0 else 0.0
        both = (f"{seconds_text(waits[0], 2)} s of waiting per epoch against "
                f"{seconds_text(waits[1], 2)} s, {seeds_text(arm['seeds'])} and "
                f"{seeds_text(bound['seeds'])}")
        pair = sides_of(arm, bound, "sync_s")
        test = noise.sync_test(*waits, pair) if waits[0] > 0 and waits[1] > 0 else None
        if test is not None and syncs_not_told_apart(*waits, noise, pair):
            sentences.append(
                f"Delayed's wait was {compare_sync(*waits, noise, pair)} bucketed's ({both}): "
                f"this sweep does not resolve how much of it the overlap hid.")
        else:
            figures = (f"; {seeds_label(test.seeds)} on both sides, {test.time_s:.2g} s against "
                       f"{test.other_s:.2g} s" if test is not None and test.subset else "")
            figures += (f"; t = {test.t:.2f} on their logs, {p_text(test.p)}"
                        if test is not None else f"; not tested: {UNTESTED_SYNC}")
            hid = percent(hidden) if hidden else "none"
            if test is not None and test.subset:  # what it hid seed for seed, and by the means
                hidden = max(1 - test.time_s / test.other_s, 0.0)
                hid = (f"{percent(hidden) if hidden else 'none'} seed for seed ({hid} by the "
                       f"means)")
            measured = (f"the overlap hid {hid} of bucketed's "
                        f"wait here ({both}{figures})")
            sentences.append(
                f"{measured[0].upper()}{measured[1:]}"
                + (": on CPU workers a sum in flight has no core of its own where the workers' "
                   "compute fills them, and gloo's thread then competes with the next step's "
                   "forward and backward." if hidden < 0.5 else "."))
    sentences.append(
        "Overlap pays where a step's sum takes as long as a good part of its compute (a slow "
        "link, a large model); where the sum is short there is little to hide, and the stale "
        "gradient is the price either way.")
    return [in_short(SHORT + _delayed_short(arm, bound, twin, noise)), dropped,
            " ".join(sentences)]


def _delayed_short(arm: pd.Series, bound: pd.Series | None, twin: pd.Series | None,
                   noise: Noise) -> str:
    """What the delayed arm measured, in a sentence for the section's first paragraph:
    its epoch beside bucketed's, its accuracy beside the synchronous optimizer's."""
    parts = []
    if bound is not None:
        beside = ratio_text(arm["epoch_s"], bound["epoch_s"], noise, sides_of(arm, bound))
        parts.append(f"its epochs were {beside} bucketed's" + _wait_short(arm, bound, noise))
    if twin is not None and not none_learned(arm) and not none_learned(twin):
        verdict, marked = accuracy_verdict(arm, twin, noise)
        parts.append(f"its accuracy was {verdict} the synchronous optimizer's "
                     f"({accuracy_figures(arm, twin, noise)}"
                     + (f"; {marked})" if marked else ")"))
    return (f" Overlapping one step's sums with the next step's computation instead (`--sync "
            f"delayed`) applies each gradient a step late: here {' and '.join(parts)}."
            if parts else "")


def _wait_short(arm: pd.Series, bound: pd.Series, noise: Noise) -> str:
    """Where delayed's wait for its sums was told apart below bucketed's (as the body
    tests it), by how much, for the first paragraph (a grading: it gave the epochs'
    null result and left the wait's out); the p is the body's, not printed twice."""
    waits = sync_seconds(arm), sync_seconds(bound)
    pair = sides_of(arm, bound, "sync_s")
    test = noise.sync_test(*waits, pair) if waits[0] > 0 and waits[1] > 0 else None
    if test is None or syncs_not_told_apart(*waits, noise, pair) or not waits[0] < waits[1]:
        return ""
    on = f"{seeds_label(test.seeds)}; " if test.subset else ""
    return (f", though its wait for sums fell to {test.time_s:.2g} s an epoch from "
            f"{test.other_s:.2g} s ({on}told apart below)")


def synchronous_at(summary: pd.DataFrame, arm: pd.Series) -> pd.Series | None:
    """The synchronous optimizer's cell at `arm`'s lr, global batch, epochs and warm-up,
    on any number of workers (k workers and one device are the same optimizer, which
    tests/processes/test_equivalence.py proves): what the delayed arm's staleness costs."""
    usable = timed(summary[(summary["status"] != Status.FAILED) & (summary["sync"] != "delayed")
                           & (summary["split"] == "even")
                           & (summary["straggler_slowdown"] == 1.0)])
    same = usable[np.isclose(usable["lr"], arm["lr"])
                  & (usable["global_batch_size"] == arm["global_batch_size"])
                  & (usable["num_epochs"] == arm["num_epochs"])
                  & (usable["warmup_epochs"] == arm["warmup_epochs"])
                  & (usable["momentum"] == arm["momentum"])
                  & (usable["model"] == arm["model"])]
    if same.empty:
        return None
    return cell(same[same["num_workers"] == same["num_workers"].min()])


def _staleness_at(half: pd.Series, synchronous: pd.Series | None, noise: Noise,
                  tuned: tuple[float, pd.Series, pd.Series] | None = None) -> str:
    """The delayed arm at a smaller lr beside the synchronous optimizer at that lr;
    `tuned`: (lr, the delayed arm's cell, the synchronous optimizer's) at the arm's own
    lr, whose gap on the same seeds the smaller lr's is read beside."""
    text = (f"Measured at a smaller lr: at lr {half['lr']:g} delayed reached "
            f"{half['final_test_acc']:.3f} ({acc_seeds_text(half)})")
    if synchronous is None:
        return text + (f"; no synchronous trial ran at lr {half['lr']:g} with its batch and "
                       f"epochs, so its staleness's price there is not measured.")
    if none_learned(synchronous):
        if none_learned(half):
            return text + (f", and synchronous SGD at the same lr did not learn either "
                           f"({synchronous['final_test_acc']:.3f}, "
                           f"{acc_seeds_text(synchronous)}): at that lr the plateau, not the "
                           f"stale gradient, sets the accuracy.")
        return text + (f", where synchronous SGD at the same lr did not learn "
                       f"({synchronous['final_test_acc']:.3f}, {acc_seeds_text(synchronous)}): "
                       f"no price of staleness to read there.")
    verdict = {-1: "the stale gradient's price at that lr",
               0: "at that lr these seeds do not tell a price of staleness apart, which does "
                  "not show there is none",
               1: "at that lr delayed did better, no price of staleness"}[
        cells_differ(half, synchronous, noise)]
    beside = ""
    if tuned is not None and not none_learned(half):
        # Both gaps on the seeds the comparison above compared (a gap of one seed beside
        # one of three would mix the seeds' shifts into the comparison).
        (seeds, subset), (tuned_lr, arm, twin) = cells_seeds(half, synchronous, noise), tuned
        gap, tuned_gap = -cells_gap(half, synchronous, noise), gap_on(twin, arm, seeds)
        on = f" on {seeds_label(seeds)}" if subset else ""
        if tuned_gap is None:
            beside = (f" (at lr {tuned_lr:g} the two did not run {seeds_label(seeds)} both: no "
                      f"gap there on the same seeds)")
        else:
            beside = (f"; its gap{on}, {gap:.3f}, is no smaller than at lr {tuned_lr:g} "
                      f"({tuned_gap:.3f}{on}): these seeds give no sign that the smaller lr "
                      f"lowered the price" if round(gap, 3) >= round(tuned_gap, 3) else
                      f" (the gap at lr {tuned_lr:g}{on}: {tuned_gap:.3f})")
    return text + (
        f", {compare_cells(half, synchronous, noise)} "
        f"synchronous SGD's {synchronous['final_test_acc']:.3f} at the same lr, global batch "
        f"{synchronous['global_batch_size']} and epochs "
        f"({counted(synchronous['num_workers'], 'worker')}, "
        f"the same optimizer at any number; {acc_seeds_text(synchronous)}): {verdict}{beside}.")


STALENESS = (
    "The stale gradient's price: on a quadratic of curvature c, synchronous SGD's "
    "w(t+1) = (1 - lr c) w(t) converges for lr c < 2, but one-step-delayed SGD's "
    "w(t+1) = w(t) - lr c w(t-1) has characteristic roots of modulus sqrt(lr c) once "
    "lr c > 1/4, so it converges only for lr c < 1: about half the step size (the "
    "reason asynchronous and stale-gradient SGD scale the lr down with the staleness, "
    "Zhang et al. 2016, 'Staleness-aware Async-SGD'). An lr tuned for the synchronous "
    "optimizer can be too large for the delayed one.")
