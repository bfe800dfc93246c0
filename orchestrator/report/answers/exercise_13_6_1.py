"""13.6.1, ResNet-18 and 16 workers, answered from a sweep (sheet.py renders it):
the ResNet-18 trials the sweep ran, ResNet-18's own bytes a step on 16 GPUs as
what-ifs checked against the book, and the scaling model's forecast for 16
workers of this cluster's compute."""

import math

import pandas as pd

from orchestrator.records import Status, counted, seconds_text
from orchestrator.report import noise_scale
from orchestrator.report import resnet18_what_if as resnet
from orchestrator.report.answers.cells import cells, part_trials, shares_gpu, timed, with_speedups
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, GPU_COMMAND, acc_seeds_text,
                                                 in_short, missing_part, numbers, percent)
from orchestrator.report.tables import markdown_table


PREDICTED_WORKERS = 16  # the book's p2.16xlarge
MODEL_NAMES = {"lenet": "LeNet", "resnet18": "ResNet-18"}
BOOK_BATCH = 256  # 13.6's batch
# Goyal et al. (2017): ResNet-50 on ImageNet (1,281,167 training images) for 90
# epochs; at batch 8192 an epoch is 157 steps.
GOYAL_EPOCHS = 90
GOYAL_STEPS_PER_EPOCH = math.ceil(1_281_167 / 8192)


def answer_13_6_1(summary: pd.DataFrame, scaling, use_gpu: bool,
                  rule_found: str | None = None, noise: Noise | None = None) -> list[str]:
    """`rule_found`: what 13.5.2 found of the linear scaling rule
    (`linear_rule.rule_outcome`), None where it was not run."""
    usable = summary[summary["status"] != Status.FAILED]
    tried = "This sweep tried " + "; ".join(
        f"{MODEL_NAMES.get(model, model)} in {counted(len(runs), 'trial')} of "
        f"{numbers(runs['num_epochs'])} epoch{'' if set(runs['num_epochs']) == {1} else 's'}, "
        f"global batches {numbers(runs['global_batch_size'])} and lrs {numbers(runs['lr'])}"
        for model, runs in usable.groupby("model", sort=True)) + "."
    resnet = timed(part_trials(summary, "resnet18"))
    if not resnet.empty:
        k = int(resnet["num_workers"].max())
        table = with_speedups(cells(resnet, ["num_workers"]), ["model"])
        table["examples_per_epoch"] = table["steps_per_epoch"] * table["global_batch_size"]
        largest = table[table["num_workers"] == k].iloc[0]
        devices = ("workers sharing one GPU" if shares_gpu(largest) else
                   "GPUs" if use_gpu else "CPU workers")
        brief = "" if use_gpu else (
            f" On CPUs it is trained briefly, "
            f"{counted(largest['epochs_run'], 'epoch')} of "
            f"{counted(largest['steps_per_epoch'], 'step')} of {int(largest['batch_size'])} "
            f"per worker on a subset, so that its compute and sync are measured on this "
            f"cluster: its accuracy is a few steps', not the recipe's (`{GPU_COMMAND}` trains "
            f"13.6's recipe).{_few_steps_learning(largest, table)}")
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
    batches = (BOOK_BATCH, PREDICTED_WORKERS * BOOK_BATCH)
    large_batch = noise_scale.large_batch_text(summary, batches, model="resnet18")
    sixteen, short, speedup, book_speedup = _resnet18_sixteen_gpus(summary, use_gpu)
    epochs = noise_scale.epochs_factor(summary, batches, model="resnet18")
    if large_batch and epochs is not None:
        to_loss, to_loss_short = _time_to_loss(speedup, epochs, book_speedup)
        large_batch += " " + to_loss
        short += " " + to_loss_short
    if not resnet.empty and not use_gpu:
        # What the exercise asks to try first, which CPU workers cannot answer.
        steps = int(largest["epochs_run"] * largest["steps_per_epoch"])
        short = (f"Its first part, ResNet-18 over epochs, batch sizes and lrs, is not answered "
                 f"here: on CPU workers it ran {counted(len(resnet), 'trial')} of "
                 f"{counted(steps, 'step')}, to time its compute and sums, too few to learn "
                 f"(`{GPU_COMMAND}` trains the recipe). {short}")
    return [in_short(short), *paragraphs, *sixteen, *_sixteen_workers(
        scaling, rule_found, noise), *([large_batch] if large_batch else [])]


# BatchNorm's default momentum (torch.nn.BatchNorm2d): each update keeps 1 - it of
# the running statistics.
BN_MOMENTUM = 0.1


def _few_steps_learning(row: pd.Series, table: pd.DataFrame) -> str:
    """What a few steps of ResNet-18 show where its test accuracy cannot: its training
    loss against chance's, ln C (the cross-entropy of a uniform guess over C classes),
    beside the 1-worker trial's (a row of `table`), and why: the running statistics
    that eval mode scores with still hold a part of their initial values
    (bench/resnet18_bn_stats.py measures the effect)."""
    loss, classes = row.get("final_train_loss"), row.get("num_classes")
    if pd.isna(loss) or pd.isna(classes):
        return ""
    chance = math.log(classes)
    mark = noise_scale.LEARNED_LOSS_FRACTION * chance  # what `noise_scale.learned` asks of a run
    updates = int(row["epochs_run"] * row["steps_per_epoch"])
    if loss < mark:
        moved = (f"{loss:.2f}, was below chance's (ln {int(classes)} = {chance:.2f}, a "
                 f"uniform guess)")
    elif loss < chance:
        moved = (f"{loss:.3f}, was below chance's (ln {int(classes)} = {chance:.2f}, a "
                 f"uniform guess) but not below {noise_scale.LEARNED_LOSS_FRACTION:.0%} of it "
                 f"({mark:.3f}), the mark by which these answers count a run as learning: "
                 f"{counted(updates, 'step')} are too few for that mark to tell")
    else:
        moved = (f"{loss:.2f}, was not below chance's (ln {int(classes)} = {chance:.2f}, a "
                 f"uniform guess)")
    one = table[table["num_workers"] == 1]
    accs = [float(row["final_test_acc"])]
    if len(one) and row["num_workers"] != 1 and not pd.isna(one["final_train_loss"].iloc[0]):
        single = one.iloc[0]
        moved += (f"; 1 worker's, at lr {single['lr']:g} and global batch "
                  f"{int(single['global_batch_size'])} over "
                  f"{counted(int(single['epochs_run'] * single['steps_per_epoch']), 'step')}, "
                  f"fell to {single['final_train_loss']:.2f}")
        accs.insert(0, float(single["final_test_acc"]))
    margin = float(noise_scale.chance_margin(classes))
    mark_acc = 1 / classes + margin
    below = (f", {'none' if len(accs) > 2 else 'neither'} above the {mark_acc:.2f} these "
             f"answers also ask of a run that learned (chance's {1 / classes:.2f} plus "
             f"{margin:.2f}),"
             if all(acc <= mark_acc for acc in accs) else "")
    scored = (f"Their test accuracies ({' and '.join(f'{acc:.3f}' for acc in accs)}){below} say"
              if len(accs) > 1 else f"Its test accuracy ({accs[0]:.3f}){below} says")
    return (f" Its last epoch's training loss, {moved}. {scored} "
            f"little after {counted(updates, 'step')}: scored in eval mode, with BatchNorm's "
            f"running statistics, which after {counted(updates, 'update')} at momentum "
            f"{BN_MOMENTUM:g} "
            f"still hold {percent((1 - BN_MOMENTUM) ** updates)} of their initial values "
            f"(`python bench/resnet18_bn_stats.py` re-estimates them from training batches "
            f"and scores the same weights again: docs/BENCHMARKS.md).")


def _resnet18_sixteen_gpus(summary: pd.DataFrame,
                           use_gpu: bool) -> tuple[list[str], str, float]:
    """ResNet-18's own 44.7 MB a step on 16 GPUs, from its measured compute where this
    sweep trained it, else the book's (cited); and the model against the book's 2 GPUs.
    With it, the section's answer in a few sentences, and the p2.16xlarge's speedup."""
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
        f"no K80 epoch is cited: a K80 computes slower than the book's GPU, which would "
        f"make communication a smaller share and the speedup higher, while a ring over "
        f"all 16 crosses the boards' switches and the host's sockets, which may carry less "
        f"than those 12 GB/s and make it lower. On that link, with "
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
        f"and a 5-epoch warm-up, over 90 epochs: at batch 8192 about "
        f"{_rounded(GOYAL_EPOCHS * GOYAL_STEPS_PER_EPOCH)} updates ({GOYAL_STEPS_PER_EPOCH} "
        f"steps an epoch of ImageNet's 1.28 M images), not 10 epochs' {10 * steps_large}: "
        f"the speedups "
        f"above are per epoch, and the epochs a large batch needs are the accuracy question "
        f"below.",
        f"Checked against the book ({resnet.BOOK_SOURCE}): from its 1-GPU epoch and "
        f"nn.DataParallel's bytes alone (over PCIe 3.0 at 12 GB/s, assumed: the book does "
        f"not say how its GPUs are joined), the model predicts "
        f"{seconds_text(check['predicted_two_gpu_epoch_s'])} s per 2-GPU epoch against the book's "
        f"{seconds_text(check['two_gpu_epoch_s'])} s: an error of {percent(check['error'])}. "
        f"Its bytes "
        f"explain little of the gap; the rest is the overhead fitted above, so this figure "
        f"sets that overhead and cannot also check it."]
    short = (f"A what-if, since no 16 GPUs ran: with the book's GPU and 256 images per GPU, "
             f"the model predicts ResNet-18's epoch up to {p2['speedup']:.1f}x as fast on the "
             f"p2.16xlarge's 16 GPUs with DDP's ring (for the book's GPU's compute, a ceiling: "
             f"the link's 12 GB/s is an upper bound, though a slower K80 would lose less to it; "
             f"{two_nodes['speedup']:.1f}x on two of today's 8-GPU nodes), but "
             f"about {data_parallel['speedup']:.1f}x with the book's own nn.DataParallel "
             f"(its overhead extrapolated from the book's one 2-GPU epoch), whose one process, "
             f"not the link, would limit it. A global "
             f"batch of {int(p2['global_batch_size'])} makes {steps_large} updates an epoch "
             f"where 256 makes {steps_book} (the book's loader, its last batch partial), so "
             f"its lr and epochs must be re-tuned (13.5.2): an epoch {p2['speedup']:.1f}x as "
             f"fast is not a route to the same accuracy {p2['speedup']:.1f}x as fast.")
    return ([markdown_table(table), " ".join(sentences)], short, float(p2["speedup"]),
            float(data_parallel["speedup"]))


def _time_to_loss(speedup: float, epochs: noise_scale.EpochsFactor,
                  book_speedup: float | None = None) -> tuple[str, str]:
    """The p2.16xlarge's per-epoch speedup (`speedup`, batch 4096 against one GPU's
    256, DDP's ring) with the epochs the noise scale says batch 4096 needs
    (`epochs`): the time to the same loss, for the paragraph and for the first one;
    and the same of the book's own nn.DataParallel (`book_speedup`)."""
    ratio = speedup / epochs.factor
    book = ""
    if book_speedup is not None:
        book_ratio = book_speedup / epochs.factor
        book = (f"; with the book's own nn.DataParallel ({book_speedup:.1f}x an epoch), about "
                f"{book_ratio:.2g}x" + (": slower than one GPU to the same loss"
                                        if book_ratio < 1 else ""))
    model = MODEL_NAMES.get(epochs.latest["model"], epochs.latest["model"])
    stand_in = (f", {model}'s noise scale standing in for ResNet-18's, which these runs "
                f"could not measure" if epochs.stand_in else "")
    return (f"Read with the p2.16xlarge's forecast above (a what-if on a what-if{stand_in}): "
            f"an epoch {speedup:.1f}x as fast at about "
            f"{noise_scale.format_factor(epochs.factor)}x the epochs reaches this loss about "
            f"{ratio:.2g}x as fast as one GPU at batch {BOOK_BATCH}"
            + (f" ({speedup / epochs.high:.2g}x to {speedup / epochs.low:.2g}x over the "
               f"noise scales measured near this loss)" if epochs.high > epochs.low else "")
            + f", not {speedup:.1f}x{book}; longer training, where the noise scale is larger, "
              f"would gain more, and a slower link less.",
            f"By the measured noise scale{f' ({model} standing in)' if epochs.stand_in else ''}, "
            f"the 16 GPUs would reach the same loss about {ratio:.2g}x as fast as one with "
            f"DDP's ring"
            # The range in the first paragraph too (a grading: 1.6x read as a finding).
            + (f" ({speedup / epochs.high:.2g}x to {speedup / epochs.low:.2g}x over the noise "
               f"scales measured near this loss; a what-if, as every figure here)"
               if epochs.high > epochs.low else " (a what-if, as every figure here)")
            + f"{book}.")


def _rounded(count: int) -> str:
    """A count to two significant digits, `14,000`: what a cited setup supports."""
    return f"{int(float(f'{count:.2g}')):,}"


def _parts_hedge(validation: pd.DataFrame) -> str:
    """How the model's compute and communication parts erred apart (the report's
    model section), where communication erred beyond the whole epoch's error: a
    forecast in which communication is a larger share of the epoch (more workers,
    a slower link) inherits more of that part's error than the trials' epochs
    did. Empty where the parts were not validated apart."""
    if not {"compute_error", "comm_error"} <= set(validation.columns):
        return ""
    compute, comm = (validation[column].dropna() for column in ("compute_error", "comm_error"))
    if comm.empty or compute.empty or abs(comm.median()) <= abs(validation["error"].median()):
        return ""
    return (f" Apart, its compute erred by a median {percent(compute.median())} and its "
            f"communication by {percent(comm.median())} ({percent(comm.min())} to "
            f"{percent(comm.max())}), so a forecast whose epoch is a share s communication "
            f"(more of it with more workers or a slower link) is, if its link's model errs "
            f"as this cluster's did, too "
            f"{'fast' if comm.median() < 0 else 'slow'} by about s x "
            f"{percent(abs(comm.median()))} beyond its compute's error.")


def _rank_errors(validation: pd.DataFrame) -> dict:
    """Per model, how far apart the scaling model's errors on different strategies
    were (the largest strategy's median error less the smallest's, over the epochs it
    reproduced): a bias shared by every strategy cancels when they are ranked, the
    spread between them does not. Models with one strategy validated are left out."""
    if validation.empty or not {"model", "sync", "error"} <= set(validation.columns):
        return {}
    medians = validation.groupby(["model", "sync"])["error"].median()
    return {model: float(errors.max() - errors.min())
            for model, errors in medians.groupby(level="model") if len(errors) > 1}


def _fastest(predicted: pd.DataFrame, best: pd.Series, noise: Noise | None,
             model_error: float | None = None) -> str:
    """The strategy predicted fastest for `best`'s model on its link (the shortest
    predicted epoch), or the tie where others come within the forecasts' error of it
    (`_ties`)."""
    tied, within = _ties(predicted, best, noise, model_error)
    return f"{best['sync']}; {', '.join(tied)} within {within}" if tied else best["sync"]


def _ties(predicted: pd.DataFrame, best: pd.Series, noise: Noise | None,
          model_error: float | None = None) -> tuple[list[str], str]:
    """The strategies whose forecast for `best`'s model, link and batch comes within
    the forecasts' error of `best`'s, the shortest, and that error as a phrase: how
    far apart the scaling model's errors on different strategies were (`model_error`,
    `_rank_errors`), where it validated two or more, else the time noise (each
    strategy's forecast starts from its own 1-worker trial, whose measured epoch
    carries it)."""
    rivals = predicted[(predicted["link"] == best["link"])
                       & (predicted["batch_scaling"] == best["batch_scaling"])
                       & (predicted["model"] == best["model"])
                       & (predicted["sync"] != best["sync"])]
    if model_error is not None and not math.isnan(model_error):
        margin, within = model_error, (f"{percent(model_error)}, how far apart the model's "
                                       f"median errors on different strategies were")
    elif noise is not None:
        margin, within = noise.time_resolution(), noise.time_noise_phrase()
    else:
        margin, within = 0.0, ""
    return sorted(set(rivals[rivals["epoch_s"] <= best["epoch_s"] * (1 + margin)]["sync"])), within


def _sixteen_workers(scaling, rule_found: str | None,
                     noise: Noise | None = None) -> list[str]:
    if scaling is None:
        return [f"No scaling model came with this sweep, so there is no prediction for "
                f"{PREDICTED_WORKERS} workers: it is fitted to measured epoch times at two "
                f"worker counts or more, which `{EXERCISES_COMMAND}` provides."]
    errors = scaling.validation["error"].abs()
    rank_errors = _rank_errors(scaling.validation)
    held_out = scaling.validation[scaling.validation["held_out"].astype(bool)]
    growth = (f"; the {len(held_out)} at a worker count its calibration did not run at within "
              f"{percent(held_out['error'].abs().max())}" if len(held_out) else
              ", all at worker counts its calibration ran at, so its growth in k is untested")
    validated = (f"The scaling model reproduced the {len(errors)} measured epoch times within "
                 f"{percent(errors.max())} (the largest |error|){growth}." if len(errors)
                 else "No measured epoch time validated the scaling model: the multi-worker "
                      "trials shared one GPU, and nothing is forecast on this cluster's own "
                      "transports." if getattr(scaling, "shared_gpu", False)
                 else "No measured epoch time validated the scaling model.")
    signed = scaling.validation["error"]
    if len(signed) >= 3 and abs(signed.median()) > 0.05:
        too_fast = signed.median() < 0
        count = int((signed < 0).sum() if too_fast else (signed > 0).sum())
        validated += (
            f" It predicted {'all ' if count == len(signed) else ''}{count} of them too "
            f"{'fast' if too_fast else 'slow'} "
            f"(median error {percent(signed.median())}), so read its forecasts as "
            f"{'optimistic' if too_fast else 'pessimistic'} by about that much.")
    validated += _parts_hedge(scaling.validation)
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
    ties = [_ties(predicted, row, noise, rank_errors.get(row["model"]))
            for _, row in best.iterrows()]
    best = best.assign(tied_within_error=[", ".join(tied) for tied, _ in ties])
    for model, rows in best.groupby("model", sort=False):
        within = next(phrase for (_, phrase), row_model in zip(ties, best["model"])
                      if row_model == model)
        sentences.append(
            f"For {MODEL_NAMES.get(model, model)} at {PREDICTED_WORKERS} workers, with the "
            f"compute per example measured on this cluster's workers (a what-if: none of these "
            f"ran), it predicts speedups of {rows['speedup'].min():.1f} to "
            f"{rows['speedup'].max():.1f} (efficiency {rows['efficiency'].min():.2f} to "
            f"{rows['efficiency'].max():.2f}) over the links and ways of scaling the batch in "
            f"the table, each over the fastest strategy's own 1-worker epoch"
            + (f"; tied_within_error names the other strategies whose forecast comes as close "
               f"to the fastest's as the forecasts' error: within {within}." if within else "."))
    if "epoch_examples" in best:
        whole = ", ".join(f"{examples:,}" for examples in sorted(best["epoch_examples"].unique()))
        sentences.append(f"Each epoch_s is a pass over the whole training set ({whole} images), "
                         f"whatever subset a model's trials ran, as in the table above.")
    tuned = rule_found or "this sweep did not test the linear scaling rule (13.5.2)"
    sentences.append(
        f"The prediction covers time only. Keeping the global batch, {PREDICTED_WORKERS} "
        f"workers run the same optimizer as one device (for a model with BatchNorm, such as "
        f"ResNet-18, only with its statistics synchronised, `--sync-batchnorm` on GPU "
        f"workers: otherwise each worker normalises its shard with that shard's own mean and "
        f"variance). But a small shard computes less efficiently per example than the "
        f"1-worker rate the model keeps, so that speedup is a ceiling. Keeping the batch per "
        f"worker multiplies the global batch by {PREDICTED_WORKERS}, whose lr must be "
        f"re-tuned: {tuned}. `scaling_model.png` draws the curves.")
    measured = best["link"].str.endswith("(measured)")
    # Every row a what-if: none of them ran, whatever link it assumes.
    best = best.assign(row=[f"what-if: this cluster's compute and {link} transport, "
                            f"extended to {PREDICTED_WORKERS} workers" if own else
                            f"what-if: this cluster's {model} compute, {link}'s bandwidth"
                            for own, link, model in zip(measured, best["link"],
                                                        best["model"])])
    return [markdown_table(best[["row", "batch_scaling", "sync", "global_batch_size",
                                 "epoch_s", "comm_s", "speedup", "efficiency",
                                 "tied_within_error"]].reset_index(drop=True)),
            " ".join(sentences)]
