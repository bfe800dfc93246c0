"""13.6's three exercises answered from a sweep (sheet.py renders them):
ResNet-18 and 16 workers, devices of different speed, overlapping steps."""

import math

import numpy as np
import pandas as pd

from orchestrator.records import Status, seconds_text
from orchestrator.report import noise_scale
from orchestrator.report.answers.cells import (at_workers, cell, cells, part_trials, timed,
                                               with_speedups)
from orchestrator.report.answers.compare import compare_cells, compare_times, within_noise
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, GPU_COMMAND, acc_seeds_text,
                                                 counted, missing_part, numbers,
                                                 one_worker_count, percent, seeds_text)
from orchestrator.report import resnet18_what_if as resnet
from orchestrator.report.summary import per_worker_text, per_worker_values
from orchestrator.report.tables import markdown_table

PREDICTED_WORKERS = 16  # the book's p2.16xlarge
MODEL_NAMES = {"lenet": "LeNet", "resnet18": "ResNet-18"}
BOOK_BATCH = 256  # 13.6's batch


def answer_13_6_1(summary: pd.DataFrame, scaling, use_gpu: bool,
                  rule_found: str | None = None, noise: Noise | None = None) -> list[str]:
    """`rule_found`: what 13.5.2 found of the linear scaling rule
    (`linear_rule.rule_outcome`), None where it was not run."""
    usable = summary[summary["status"] != Status.FAILED]
    tried = "This sweep tried " + "; ".join(
        f"{MODEL_NAMES.get(model, model)} in {counted(len(runs), 'trial')} of "
        f"{numbers(runs['num_epochs'])} epochs, global batches "
        f"{numbers(runs['global_batch_size'])} and lrs {numbers(runs['lr'])}"
        for model, runs in usable.groupby("model", sort=True)) + "."
    resnet = timed(part_trials(summary, "resnet18"))
    if not resnet.empty:
        k = int(resnet["num_workers"].max())
        table = with_speedups(cells(resnet, ["num_workers"]), ["model"])
        table["examples_per_epoch"] = table["steps_per_epoch"] * table["global_batch_size"]
        largest = table[table["num_workers"] == k].iloc[0]
        devices = "GPUs" if use_gpu else "CPU workers"
        brief = "" if use_gpu else (
            f" On CPUs it is trained briefly, {int(largest['epochs_run'])} epochs of "
            f"{int(largest['steps_per_epoch'])} steps of {int(largest['batch_size'])} per worker "
            f"on a subset, so that its compute and sync are measured on this cluster: its "
            f"accuracy is a few steps', not the recipe's (`{GPU_COMMAND}` trains 13.6's "
            f"recipe).{_few_steps_learning(largest)}")
        paragraphs = [markdown_table(table[["num_workers", "global_batch_size", "lr",
                                            "steps_per_epoch", "examples_per_epoch", "epoch_s",
                                            "sync_share", "speedup", "final_test_acc",
                                            "seeds"]].reset_index(drop=True)),
                      f"{tried} ResNet-18 on {k} {devices} (global batch "
                      f"{largest['global_batch_size']}, lr {largest['lr']:g}) took "
                      f"{seconds_text(largest['epoch_s'])} s per epoch, "
                      f"{percent(largest['sync_share'])} of it in gradient sync"
                      + (f", speedup {largest['speedup']:.2f} in throughput (examples a "
                         f"second: its epoch holds {int(largest['examples_per_epoch']):,} "
                         f"examples, 1 worker's {int(table['examples_per_epoch'].iloc[0]):,})"
                         if k > 1 and not pd.isna(largest["speedup"]) else "")
                      + f", final test accuracy "
                      f"{largest['final_test_acc']:.3f} ({acc_seeds_text(largest)})."
                      + brief]
    elif use_gpu:
        paragraphs = [f"{tried} {missing_part('resnet18')}"]
    else:
        paragraphs = [f"{tried} ResNet-18 needs GPUs, which this sweep's workers were not: "
                      f"`{GPU_COMMAND}` trains it."]
    # 13.6's batch of 256 on 16 GPUs the book's way, 256 each: a global batch of 4096.
    large_batch = noise_scale.large_batch_text(
        summary, (BOOK_BATCH, PREDICTED_WORKERS * BOOK_BATCH), model="resnet18")
    return paragraphs + _resnet18_sixteen_gpus(summary, use_gpu) + _sixteen_workers(
        scaling, rule_found, noise) + ([large_batch] if large_batch else [])


# BatchNorm's default momentum (torch.nn.BatchNorm2d): each update keeps 1 - it of
# the running statistics.
BN_MOMENTUM = 0.1


def _few_steps_learning(row: pd.Series) -> str:
    """What a few steps of ResNet-18 show where its test accuracy cannot: its training
    loss against chance's, ln C (the cross-entropy of a uniform guess over C classes),
    and why: the running statistics that eval mode scores with still hold a part of
    their initial values (bench/resnet18_bn_stats.py measures the effect)."""
    loss, classes = row.get("final_train_loss"), row.get("num_classes")
    if pd.isna(loss) or pd.isna(classes):
        return ""
    chance = math.log(classes)
    moved = ("below" if loss < chance else "not below")
    updates = int(row["epochs_run"] * row["steps_per_epoch"])
    return (f" Its last epoch's training loss, {loss:.2f}, was {moved} chance's "
            f"(ln {int(classes)} = {chance:.2f}, a uniform guess). Its test accuracy says "
            f"little after {updates} steps: it is scored in eval mode, with BatchNorm's "
            f"running statistics, which after {updates} updates at momentum {BN_MOMENTUM:g} "
            f"still hold {percent((1 - BN_MOMENTUM) ** updates)} of their initial values "
            f"(`python bench/resnet18_bn_stats.py` re-estimates them from training batches "
            f"and scores the same weights again: docs/BENCHMARKS.md).")


def _resnet18_sixteen_gpus(summary: pd.DataFrame, use_gpu: bool) -> list[str]:
    """ResNet-18's own 44.7 MB a step on 16 GPUs, from its measured compute where this
    sweep trained it, else the book's (cited); and the model against the book's 2 GPUs."""
    table = resnet.sixteen_gpu_rows(summary, use_gpu)
    check = resnet.book_check()
    measured = resnet.measured_compute(summary, use_gpu)
    compute = ("this sweep's own 1-worker ResNet-18 epoch (measured) and the book's"
               if measured else "the book's own (cited: this sweep trained no ResNet-18 on "
               "one worker)")
    book = resnet.book_compute().label
    ours = table[table["row"].str.contains(book, regex=False)]
    p2 = ours[ours["row"].str.contains("p2.16xlarge.*DDP's ring")].iloc[0]
    data_parallel = ours[ours["row"].str.contains("nn.DataParallel")].iloc[0]
    two_nodes = ours[ours["row"].str.contains("two 8-GPU nodes")].iloc[0]
    steps_large = math.ceil(resnet.FASHION_MNIST_TRAIN / p2["global_batch_size"])
    steps_book = math.ceil(resnet.FASHION_MNIST_TRAIN / BOOK_BATCH)
    sentences = [
        f"For ResNet-18 itself: {resnet.RESNET18_PARAMETERS:,} parameters in "
        f"{resnet.RESNET18_TENSORS} tensors, {resnet.RESNET18_GRADIENT_BYTES / 1e6:.1f} MB of "
        f"fp32 gradients a step, summed by a ring allreduce in DDP's 25 MB buckets; compute "
        f"per step of 256 examples from {compute}. Every row is a what-if, labelled with "
        f"the compute and the link it combines, and its epoch_s is a whole epoch of "
        f"{resnet.FASHION_MNIST_TRAIN:,} images. The book's p2.16xlarge is 8 K80 boards, 16 "
        f"GPUs, joined by PCIe 3.0 (about 12 GB/s a direction, docs/SCALING_MODEL.md), but "
        f"no K80 epoch is cited, and a K80 computes slower than the book's GPU, which would "
        f"make communication a smaller share and the speedup higher. On that link, with "
        f"the book's compute and 256 examples per GPU (global batch "
        f"{int(p2['global_batch_size'])}), the model predicts a speedup of "
        f"{p2['speedup']:.1f} (efficiency {p2['efficiency']:.2f}) for DDP's ring. The book's "
        f"own program, nn.DataParallel, moves about as many bytes: each step it broadcasts "
        f"the parameters from GPU 0 and reduces the gradients onto it, NCCL collectives "
        f"that pipeline the 44.7 MB through every link once (torch.nn.parallel.comm). What "
        f"it adds is its one process's work for every replica: re-copying the module, "
        f"scattering the batch and gathering the outputs through GPU 0, the replicas' "
        f"threads under one interpreter lock. Fitted to the book's 2-GPU epoch "
        f"({1000 * check['overhead_s_per_step']:.0f} ms a step beyond its compute and "
        f"bytes) and assumed to grow with the replicas beyond GPU 0, that overhead gives "
        f"{data_parallel['speedup']:.1f} (efficiency {data_parallel['efficiency']:.2f}) on 16 "
        f"GPUs: a what-if resting on one measured point, which says that the book's program, "
        f"not its link, would limit it. Sixteen GPUs of today come as two 8-GPU nodes, "
        f"NVLink inside and a network between (one 100 Gb/s RDMA link per node assumed): "
        f"summed in two levels, {two_nodes['speedup']:.1f} (efficiency "
        f"{two_nodes['efficiency']:.2f}). At global batch {int(p2['global_batch_size'])} an "
        f"epoch is {steps_large} steps, so the book's 10 epochs make {10 * steps_large} "
        f"updates where batch {BOOK_BATCH} makes {10 * steps_book:,}; Goyal et al. (2017) "
        f"kept batch 256's accuracy up to batch 8192 on ImageNet with the lr scaled linearly "
        f"and a 5-epoch warm-up, over 90 epochs of 5,000 steps or more, not 10 epochs of "
        f"{steps_large}: the speedups above are per epoch, and the epochs a large batch "
        f"needs are the accuracy question below.",
        f"Checked against the book ({resnet.BOOK_SOURCE}): from its 1-GPU epoch and "
        f"nn.DataParallel's bytes alone (over PCIe 3.0 at 12 GB/s, assumed: the book does "
        f"not say how its GPUs are joined), the model predicts "
        f"{seconds_text(check['predicted_two_gpu_epoch_s'])} s per 2-GPU epoch against the book's "
        f"{seconds_text(check['two_gpu_epoch_s'])} s: an error of {percent(check['error'])}. "
        f"Its bytes "
        f"explain little of the gap; the rest is the overhead fitted above, so this figure "
        f"sets that overhead and cannot also check it."]
    return [markdown_table(table), " ".join(sentences)]


def _fastest(predicted: pd.DataFrame, best: pd.Series, noise: Noise | None) -> str:
    """The strategy predicted fastest for `best`'s model on its link (the shortest
    predicted epoch), or the tie where others come within the time noise of it: each
    strategy's forecast starts from its own 1-worker trial, whose measured epoch
    carries that noise."""
    rivals = predicted[(predicted["link"] == best["link"])
                       & (predicted["batch_scaling"] == best["batch_scaling"])
                       & (predicted["model"] == best["model"])
                       & (predicted["sync"] != best["sync"])]
    margin = noise.time_fraction if noise is not None else 0.0
    tied = sorted(set(rivals[rivals["epoch_s"] <= best["epoch_s"] * (1 + margin)]["sync"]))
    if not tied:
        return best["sync"]
    return f"{best['sync']}; {', '.join(tied)} within the time noise, {noise.time_label()}"


def _sixteen_workers(scaling, rule_found: str | None,
                     noise: Noise | None = None) -> list[str]:
    if scaling is None:
        return [f"No scaling model came with this sweep, so there is no prediction for "
                f"{PREDICTED_WORKERS} workers: it is fitted to measured epoch times at two "
                f"worker counts or more, which `{EXERCISES_COMMAND}` provides."]
    errors = scaling.validation["error"].abs()
    held_out = scaling.validation[scaling.validation["held_out"].astype(bool)]
    growth = (f"; the {len(held_out)} at a worker count its calibration did not run at within "
              f"{percent(held_out['error'].abs().max())}" if len(held_out) else
              ", all at worker counts its calibration ran at, so its growth in k is untested")
    validated = (f"The scaling model reproduced the {len(errors)} measured epoch times within "
                 f"{percent(errors.max())} (the largest |error|){growth}." if len(errors)
                 else "No measured epoch time validated the scaling model.")
    signed = scaling.validation["error"]
    if len(signed) >= 3 and abs(signed.median()) > 0.05:
        too_fast = signed.median() < 0
        count = int((signed < 0).sum() if too_fast else (signed > 0).sum())
        validated += (
            f" It predicted {count} of them too {'fast' if too_fast else 'slow'} "
            f"(median error {percent(signed.median())}), so read its forecasts as "
            f"{'optimistic' if too_fast else 'pessimistic'} by about that much "
            f"(the report's model section gives its compute's and communication's errors "
            f"apart).")
    own = scaling.predictions[scaling.predictions["link"].str.endswith("(measured)")]
    if not own.empty and own["num_workers"].max() < PREDICTED_WORKERS:
        validated += (f" On this cluster's own transports it predicts no further than the "
                      f"{int(own['num_workers'].max())} workers measured at once (their "
                      f"contention beyond is unknown: `scaling_model.csv`); {PREDICTED_WORKERS} "
                      f"workers are predicted on named links, each worker on a device of its "
                      f"own.")
    predicted = scaling.predictions[scaling.predictions["num_workers"] == PREDICTED_WORKERS]
    if predicted.empty:
        return [f"{validated} Its predictions stop short of {PREDICTED_WORKERS} workers."]
    # Per model, link and way of scaling the batch, the strategy whose epoch the model
    # predicts shortest (their speedups are over different 1-worker epochs).
    best = predicted.sort_values("epoch_s").groupby(["model", "link", "batch_scaling"],
                                                    sort=False).head(1)
    best = best.sort_values(["model", "batch_scaling", "speedup"])
    sentences = [validated]
    for (model, scaling_name), rows in best.groupby(["model", "batch_scaling"], sort=False):
        batch = int(rows["global_batch_size"].iloc[0])
        how = (f"with the global batch kept at {batch} (a shard of "
               f"{batch // PREDICTED_WORKERS} examples per worker)" if scaling_name == "global"
               else f"with {batch // PREDICTED_WORKERS} examples per worker (global batch "
                    f"{batch}, 13.6's way)")
        per_link = "; ".join(f"{row['speedup']:.1f} (efficiency {row['efficiency']:.2f}, "
                             f"{_fastest(predicted, row, noise)}) over {row['link']}"
                             for _, row in rows.iterrows())
        sentences.append(f"For {MODEL_NAMES.get(model, model)} at {PREDICTED_WORKERS} workers, "
                         f"{how}, with the compute per example measured on this cluster's "
                         f"workers (a what-if: none of these ran), it predicts a speedup of "
                         f"{per_link}, each over that strategy's own 1-worker epoch.")
    tuned = rule_found or "this sweep did not test the linear scaling rule (13.5.2)"
    sentences.append(
        "The prediction covers time only. Keeping the global batch, 16 workers run the same "
        "optimizer as one device, but a small shard computes less efficiently per example "
        "than the 1-worker rate the model keeps, so that speedup is a ceiling; keeping the "
        f"batch per worker multiplies the global batch by {PREDICTED_WORKERS}, whose lr "
        f"must be re-tuned: {tuned}. `scaling_model.png` draws the curves.")
    measured = best["link"].str.endswith("(measured)")
    # Every row a what-if: none of them ran, whatever link it assumes.
    best = best.assign(row=[f"what-if: this cluster's compute and {link} transport, "
                            f"extended to {PREDICTED_WORKERS} workers" if own else
                            f"what-if: this cluster's {model} compute, {link}'s bandwidth"
                            for own, link, model in zip(measured, best["link"],
                                                        best["model"])])
    return [markdown_table(best[["row", "batch_scaling", "sync", "global_batch_size",
                                 "epoch_s", "comm_s", "speedup",
                                 "efficiency"]].reset_index(drop=True)),
            " ".join(sentences)]


def answer_13_6_2(summary: pd.DataFrame, epochs: pd.DataFrame, noise: Noise) -> list[str]:
    split = timed(part_trials(summary, "split"))
    even, proportional = (split[split["split"] == name] for name in ("even", "proportional"))
    if even.empty or proportional.empty:
        return [missing_part("split")]
    even, proportional = even.iloc[0], proportional.iloc[0]
    k, slowdown = proportional["num_workers"], proportional["straggler_slowdown"]
    unslowed = timed(part_trials(summary, "batch-global"))
    unslowed = unslowed[(unslowed["straggler_slowdown"] == 1.0)
                        & (unslowed["global_batch_size"] == proportional["global_batch_size"])]
    plain, alone = at_workers(unslowed, k), at_workers(unslowed, 1)
    even_last, proportional_last = (_last_epoch(epochs, trial["trial_id"])
                                    for trial in (even, proportional))
    ideal_s = _ideal_epoch_s(even_last)
    # Every time from the one window (each trial's epochs after the first, which a
    # proportional split spends even before it re-sets its shares), the trials
    # without a straggler averaged over their seeds as every cell is.
    rows = [("even, straggler", even, even_last),
            ("proportional, straggler", proportional, proportional_last),
            ("even, no straggler", plain, None), ("the fast worker alone", alone, None)]
    table = pd.DataFrame([{"setup": setup, "epoch_s": row["epoch_s"],
                           "seeds": int(row.get("seeds", 1)),
                           "last_epoch_shares": _joined(last if last is not None else
                                                        _last_epoch(epochs, row["trial_id"]),
                                                        "worker_shares", "g"),
                           "last_epoch_compute_s": _joined(last, "worker_compute_s", ".2f")}
                          for setup, row, last in rows if row is not None])
    if ideal_s is not None:
        table.loc[len(table)] = ["ideal for the even trial's measured speeds", ideal_s, 1, "",
                                 ""]
    even_s, proportional_s = even["epoch_s"], proportional["epoch_s"]
    shares = _joined(proportional_last, "worker_shares", "g")
    sentences = [
        f"With the last of {k} workers slowed {slowdown:g}x (one trial each, seed "
        f"{int(even['seed'])}; epochs after the first, as everywhere: a proportional split "
        f"starts even and re-sets its shares after its first epoch), an even split of the "
        f"global batch of {proportional['global_batch_size']} took {seconds_text(even_s)} s per "
        f"epoch "
        f"and the proportional split {seconds_text(proportional_s)} s: proportional was "
        f"{compare_times(proportional_s, even_s, noise)} even"
        + (f"; without the straggler the same {k} workers took {seconds_text(plain['epoch_s'])} s "
           f"({seeds_text(plain['seeds'])})." if plain is not None else ".")]
    if shares:
        sentences.append(f"The proportional split settled on shares {shares} (examples per "
                         f"step), set from each worker's examples per second of forward and "
                         f"backward in the epoch before.")
    if ideal_s is not None:
        sentences.append(f"For the speeds the even trial measured, the ideal split would take "
                         f"{seconds_text(ideal_s)} s ({even_s / ideal_s:.2f}x faster than "
                         f"even); the "
                         f"proportional split's {seconds_text(proportional_s)} s is "
                         f"{compare_times(proportional_s, ideal_s, noise)} that.")
    if alone is not None:
        alone_s = alone["epoch_s"]
        sentences.append(
            f"Is the slow device worth having at all? The fast worker alone took "
            f"{seconds_text(alone_s)} s "
            f"per epoch ({seeds_text(alone['seeds'])}; the whole global batch, no sum): the "
            f"even split with the straggler was {compare_times(even_s, alone_s, noise)} it, "
            f"the proportional split {compare_times(proportional_s, alone_s, noise)} it.")
    sentences.append(
        f"The straggler is emulated: the last worker stays busy on its core until its "
        f"forward and backward have taken {slowdown:g}x their time, as a slower CPU would "
        f"compute (a sleep would hand its core to the other worker).")
    worth = proportional_s < even_s and not within_noise(proportional_s, even_s, noise)
    sentences.append(("Worth it here: the gain is beyond the noise. " if worth else
                      "Not worth it here: the gain is not beyond the noise. ") + (
        "Divide the work in proportion to each device's measured speed. With a GPU and a CPU "
        "of very different speed, an even split makes the GPU wait for the CPU at every step; "
        "the proportional split gives each its share, but the gain is bounded by the slow "
        "device's share of the work, small when the CPU is much slower, and its cost is "
        "re-timing every device and re-splitting the batch."))
    return [markdown_table(table), " ".join(sentences)]


DROPPED_WAIT = (
    "Dropping `npx.waitall()`: MXNet's engine, like PyTorch on a GPU, returns before the "
    "queued work has run, so the epoch's timer would stop once the work is queued, not done, "
    "and the next read of a result (the evaluation) would wait for it instead: epochs would "
    "look shorter without training getting faster, and the host could run ahead by a whole "
    "epoch of queued steps. 13.5's PyTorch code calls `torch.cuda.synchronize()` where "
    "MXNet's calls `npx.waitall()`; 13.6's PyTorch `train` stops its timer with neither, yet "
    "its epoch times hold nearly all the work: each step's `X.to(devices[0])`, a blocking "
    "copy, waits for the steps queued before it, so at most the last step's work is left "
    "out. On a CPU torch runs every operation to its end before it returns, so there is "
    "nothing to drop{measured}.")
OVERLAP = (
    "Overlapping two steps is `--sync delayed` (training/sync/delayed.py): step t's allreduce "
    "is launched asynchronously right after its backward, step t+1's forward and backward run "
    "while it is in flight, and step t+1 applies step t's summed gradient. That is "
    "one-step-delayed SGD, w(t+1) = w(t) - lr * g(w(t-1)) (Pipe-SGD, Li et al. 2018; "
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
        ": this sweep's workers are CPUs, and the effect shows only on a GPU"))
    usable = timed(summary[summary["status"] != Status.FAILED])
    delayed = timed(part_trials(summary, "delayed"))
    delayed = delayed[delayed["sync"] == "delayed"]
    if delayed.empty:
        gap = (one_worker_count(usable) if usable["num_workers"].nunique() < 2
               else missing_part("delayed"))
        return [dropped, f"{OVERLAP} {gap}"]
    k = int(delayed["num_workers"].max())
    if k < 2:
        return [dropped, f"{OVERLAP} {one_worker_count(delayed)}"]
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
    timed_beside = [f"{compare_times(arm['epoch_s'], row['epoch_s'], noise)} {name} "
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
    if bound is not None:
        # The most any overlap can save is the time a step waits for its sums.
        resolvable = bound["sync_share"] > noise.time_fraction
        sentences.append(
            f"The most any overlap can save is the synchronous step's wait for its sums, "
            f"{percent(bound['sync_share'])} of bucketed's epoch here, against a time noise of "
            f"{noise.time_label()}: " + (
                (f"only an overlap that hides more than "
                 f"{percent(noise.time_fraction / bound['sync_share'])} of that wait could be "
                 f"told from the noise.") if resolvable else
                "this sweep cannot resolve a gain of that size, whatever the overlap does; "
                "more replicas (`--repeats`) or a slower link would."))
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
            f"After {arm['epochs_run']} epochs its final test accuracy was "
            f"{arm['final_test_acc']:.3f} ({acc_seeds_text(arm)}), "
            f"{compare_cells(arm, twin, noise)} the "
            f"synchronous optimizer's {twin['final_test_acc']:.3f} ({twin['sync']}, the same "
            f"lr {twin['lr']:g}, global batch {twin['global_batch_size']} and seeds; "
            f"{acc_seeds_text(twin)}).")
    sentences.append(STALENESS)
    half = at_workers(smaller, k) if not smaller.empty else None
    if half is not None:
        sentences.append(_staleness_at(half, synchronous_at(summary, half), noise))
    if bound is not None and not use_gpu:
        waits = arm["sync_share"] * arm["epoch_s"], bound["sync_share"] * bound["epoch_s"]
        hidden = max(1 - waits[0] / waits[1], 0.0) if waits[1] > 0 else 0.0
        measured = (f"the overlap hid {percent(hidden) if hidden else 'none'} of bucketed's wait "
                    f"here ({seconds_text(waits[0], 2)} s of waiting per epoch against "
                    f"{seconds_text(waits[1], 2)} s, {seeds_text(arm['seeds'])} and "
                    f"{seeds_text(bound['seeds'])}; this sweep estimates no noise of waiting "
                    f"times)")
        sentences.append(
            f"{measured[0].upper()}{measured[1:]}"
            + (": on CPU workers a sum in flight has no core of its own where the workers' "
               "compute fills them, and gloo's thread then competes with the next step's "
               "forward and backward." if hidden < 0.5 else "."))
    sentences.append(
        "Overlap pays where a step's sum takes as long as a good part of its compute (a slow "
        "link, a large model); where the sum is short there is little to hide, and the stale "
        "gradient is the price either way.")
    return [dropped, " ".join(sentences)]


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


def _staleness_at(half: pd.Series, synchronous: pd.Series | None, noise: Noise) -> str:
    """The delayed arm at a smaller lr beside the synchronous optimizer at that lr."""
    text = (f"Measured at a smaller lr: at lr {half['lr']:g} delayed reached "
            f"{half['final_test_acc']:.3f} ({acc_seeds_text(half)})")
    if synchronous is None:
        return text + (f"; no synchronous trial ran at lr {half['lr']:g} with its batch and "
                       f"epochs, so its staleness's price there is not measured.")
    if int(synchronous["not_learned"]) >= int(synchronous["seeds"]):
        if int(half["not_learned"]) >= int(half["seeds"]):
            return text + (f", and synchronous SGD at the same lr did not learn either "
                           f"({synchronous['final_test_acc']:.3f}, "
                           f"{acc_seeds_text(synchronous)}): at that lr the plateau, not the "
                           f"stale gradient, sets the accuracy.")
        return text + (f", where synchronous SGD at the same lr did not learn "
                       f"({synchronous['final_test_acc']:.3f}, {acc_seeds_text(synchronous)}): "
                       f"no price of staleness to read there.")
    return text + (
        f", {compare_cells(half, synchronous, noise)} "
        f"synchronous SGD's {synchronous['final_test_acc']:.3f} at the same lr, global batch "
        f"{synchronous['global_batch_size']} and epochs "
        f"({counted(synchronous['num_workers'], 'worker')}, "
        f"the same optimizer at any number; {acc_seeds_text(synchronous)}): the "
        f"stale gradient's price at that lr.")


STALENESS = (
    "The stale gradient's price: on a quadratic of curvature c, synchronous SGD's "
    "w(t+1) = (1 - lr c) w(t) converges for lr c < 2, but one-step-delayed SGD's "
    "w(t+1) = w(t) - lr c w(t-1) has characteristic roots of modulus sqrt(lr c) once "
    "lr c > 1/4, so it converges only for lr c < 1: about half the step size (the "
    "reason asynchronous and stale-gradient SGD scale the lr down with the staleness, "
    "Zhang et al. 2016, 'Staleness-aware Async-SGD'). An lr tuned for the synchronous "
    "optimizer can be too large for the delayed one.")


def _last_epoch(epochs: pd.DataFrame, trial_id: str, up_to: float = float("inf")
                ) -> pd.Series | None:
    history = epochs[(epochs["trial_id"] == trial_id) & (epochs["epoch"] <= up_to)
                     ].sort_values("epoch")
    return None if history.empty else history.iloc[-1]


def _joined(epoch: pd.Series | None, column: str, spec: str) -> str:
    return per_worker_text(epoch[column], spec) if epoch is not None and column in epoch else ""


def _ideal_epoch_s(last: pd.Series | None) -> float | None:
    """An epoch with its compute re-divided by measured speed: each worker's
    examples per second from its share and seconds, the rest of the epoch kept."""
    shares = per_worker_values(last["worker_shares"]) if last is not None else None
    compute_s = per_worker_values(last["worker_compute_s"]) if last is not None else None
    if not shares or not compute_s:
        return None
    speeds = [share / seconds for share, seconds in zip(shares, compute_s)]
    return last["epoch_time_s"] - max(compute_s) + sum(shares) / sum(speeds)
