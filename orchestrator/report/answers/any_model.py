"""The answers for a model or data set of the user's own (`--model`, `--dataset`).

The book's seven exercises are about its networks on Fashion-MNIST. What they
ask of any model is the same four questions, answered here from the sweep's
own trials with the same evidence rules (noise.py and cells.py: one timing
window, replicas, noise): how many workers are worth it, which sync strategy,
which learning rate at each worker count, and what more workers would give (the
scaling model's forecast, a what-if beyond the counts measured).
"""

import math

import pandas as pd

from orchestrator.config.dataset import FASHION_MNIST
from orchestrator.config.options import MODELS
from orchestrator.records import Status, counted
from orchestrator.report import noise_scale
from orchestrator.report.answers.cells import cells, shares_gpu, timed, with_speedups
from orchestrator.report.answers.compare import compare_cells, compare_times, times_differ
from orchestrator.report.answers.noise import CONFIG_KEYS, Noise
from orchestrator.report.answers.sides import sides_of
from orchestrator.report.answers.wording import acc_seeds_text, percent, seeds_text
from orchestrator.report.tables import isolation_table, markdown_table

# A cell of trials that differ only in their worker count (and seed, and the
# transport that the worker count chose).
SCALING_GROUP = ["model", "sync", "split", "precision", "threads_per_worker",
                 "global_batch_size", "lr", "momentum"]
FORECAST_WORKERS = (1, 2, 4, 8, 16, 32, 64)
OWN_MODEL_SWEEP = ("python experiments/sweep.py --model {model} --dataset {dataset} "
                   "--workers 1,2,4 --sync scratch,bucketed,ddp --lr 0.05,0.1,0.2 --repeats 3")


def is_book(summary: pd.DataFrame) -> bool:
    """Whether the sweep trained the book's networks on the book's data set."""
    models = set(summary.get("model", pd.Series(dtype=object)).dropna())
    datasets = set(summary.get("dataset", pd.Series(dtype=object)).dropna())
    return models <= set(MODELS) and datasets <= {FASHION_MNIST}


def answers(summary: pd.DataFrame, scaling, noise: Noise) -> list[tuple[str, list[str]]]:
    """(title, paragraphs) per question, from a `prepared` summary."""
    usable = timed(summary[summary["status"] != Status.FAILED].dropna(subset=["epoch_s"]))
    model = _one(summary, "model")
    dataset = _one(summary, "dataset")
    command = OWN_MODEL_SWEEP.format(model=model, dataset=dataset)
    return [("How many workers are worth it", _workers(usable, noise, command)),
            ("Which sync strategy", _strategies(usable, noise)),
            ("Which learning rate at each worker count", _lrs(summary)),
            ("What more workers would give", _forecast(summary, scaling, model))]


def intro(summary: pd.DataFrame) -> str:
    model, dataset = _one(summary, "model"), _one(summary, "dataset")
    return (f"The book's seven exercises (13.5.1 to 13.6.3) are about its own networks, "
            f"LeNet and ResNet-18, on Fashion-MNIST; this sweep trained `{model}` on "
            f"`{dataset}`. The questions below are those the chapters ask of any model, "
            f"answered from this sweep's trials; `--preset exercises` answers the book's "
            f"own. Whether k workers train exactly as one device is a property of the model "
            f"(BatchNorm's batch statistics break it): `python experiments/train.py --model "
            f"{model} --dataset {dataset} --workers 2 --check-equivalence` checks it.")


def _workers(usable: pd.DataFrame, noise: Noise, command: str) -> list[str]:
    if usable["num_workers"].nunique() < 2:
        return [f"This sweep ran one worker count only; `{command}` compares several."]
    table = with_speedups(cells(usable, CONFIG_KEYS), SCALING_GROUP)
    varying = [column for column in ("sync", "split", "precision", "global_batch_size", "lr",
                                     "momentum") if table[column].nunique() > 1]
    columns = [*varying, "num_workers", "epoch_s", "speedup", "efficiency", "sync_share",
               "final_test_acc", "seeds"]
    paragraphs = [markdown_table(table[columns].reset_index(drop=True))]
    for _, group in table.groupby(SCALING_GROUP, sort=False, dropna=False):
        group = group.sort_values("num_workers")
        if len(group) < 2:
            continue
        paragraphs.append(_worth_it(group, noise))
    return paragraphs


def _worth_it(group: pd.DataFrame, noise: Noise) -> str:
    """Each added step of workers: faster beyond the noise or not, and the accuracy
    against one worker's; the last count that still paid."""
    first = group.iloc[0]
    label = (f"sync {first['sync']}, global batch {int(first['global_batch_size'])}, "
             f"lr {first['lr']:g}")
    steps, paid, shared = [], int(first["num_workers"]), False
    for before, after in zip(group.iloc[:-1].itertuples(), group.iloc[1:].itertuples()):
        if shares_gpu(after._asdict()):  # they took turns on one GPU: no speedup to read
            steps.append(f"{after.num_workers} workers ({after.epoch_s:.3g} s/epoch, "
                         f"{seeds_text(after.seeds)}) shared one GPU, so are not timed "
                         f"against {before.num_workers}")
            shared = True
            continue
        verdict = compare_times(after.epoch_s, before.epoch_s, noise,
                                sides_of(after._asdict(), before._asdict()))
        steps.append(f"{after.num_workers} workers ({after.epoch_s:.3g} s/epoch, "
                     f"{seeds_text(after.seeds)}) are {verdict} {before.num_workers} "
                     f"({before.epoch_s:.3g} s)")
        if paid == before.num_workers and times_differ(
                after.epoch_s, before.epoch_s, noise,
                sides_of(after._asdict(), before._asdict())) < 0:
            paid = after.num_workers
    # The row itself, its num_workers kept (a configuration's key, `SeedBlocks.in_pool`).
    best = group[group["num_workers"] == paid].iloc[0]
    accuracy = ""
    if not math.isnan(best["final_test_acc"]) and paid != first["num_workers"]:
        failed = [f"{acc_seeds_text(row)} at {counted(workers, 'worker')}"
                  for workers, row in ((paid, best), (int(first["num_workers"]), first))
                  if int(row.get("not_learned", 0)) >= int(row["seeds"])]
        if failed:  # a run that does not learn is a failure, not an accuracy to compare
            accuracy = (f" Its final test accuracy says nothing of the workers: no seed "
                        f"learned ({'; '.join(failed)}; {best['final_test_acc']:.3f} and "
                        f"{first['final_test_acc']:.3f}).")
        else:
            versus = compare_cells(best, first, noise)
            accuracy = (f" Its final test accuracy is {versus} {int(first['num_workers'])} "
                        f"worker's ({best['final_test_acc']:.3f}, {acc_seeds_text(best)}, and "
                        f"{first['final_test_acc']:.3f}, {acc_seeds_text(first)}).")
    efficiency = ("" if math.isnan(best["efficiency"]) else
                  f", at an efficiency of {best['efficiency']:.2f} with "
                  f"{percent(best['sync_share'])} of each epoch in gradient sync")
    if best["efficiency"] > 1:
        efficiency += (" (above 1: each worker's smaller shard ran faster per example, in "
                       f"its caches, or the times carry their noise: "
                       f"{noise.time_noise_phrase()})")
    if paid == first["num_workers"]:
        return (f"With {label}: " + "; ".join(steps) + (
            ". Whether more workers pay, workers sharing one GPU cannot tell." if shared else
            ". More workers did not pay beyond the noise here."))
    return (f"With {label}: " + "; ".join(steps) + f". More workers paid up to {paid}"
            + (" (the most this sweep ran)" if paid == group["num_workers"].max() else "")
            + efficiency + "." + accuracy)


def _strategies(usable: pd.DataFrame, noise: Noise) -> list[str]:
    many = usable[usable["num_workers"] > 1]
    if many["sync"].nunique() < 2:
        return [f"One strategy ran ({', '.join(sorted(usable['sync'].unique()))}); "
                f"`--sync scratch,bucketed,ddp,sharded` compares them on the same trials."]
    k = int(many["num_workers"].max())
    at_k = cells(many[many["num_workers"] == k], CONFIG_KEYS).sort_values("epoch_s")
    fastest = at_k.iloc[0]
    lines = [markdown_table(at_k[["sync", "transport", "epoch_s", "sync_share", "seeds"]]
                            .reset_index(drop=True))]
    others = [f"{compare_times(fastest['epoch_s'], row['epoch_s'], noise, sides_of(fastest, row))}"
              f" {row['sync']} ({row['epoch_s']:.3g} s)" for _, row in at_k.iloc[1:].iterrows()]
    lines.append(f"At {k} workers {fastest['sync']} ({fastest['epoch_s']:.3g} s/epoch) is "
                 + "; ".join(others) + ". The exact strategies (all but delayed) compute "
                 "the same update (tested), so they differ in time only; over different "
                 "transports (the table's) the time compares the transports as well.")
    return lines


def _lrs(summary: pd.DataFrame) -> list[str]:
    table = isolation_table(summary)
    if table.empty:
        return ["No trial finished."]
    varying = [column for column in ("sync", "split", "precision", "batch_scaling")
               if table[column].nunique() > 1]
    lines = [markdown_table(table[[*varying, "num_workers", "batch_size", "lrs_searched",
                                   "best_lr", "best_final_test_acc", "trials", "on_edge"]])]
    if summary["base_lr"].nunique() < 2:
        lines.append("One learning rate ran: `--lr 0.05,0.1,0.2,0.4` searches a range at "
                     "each worker count (with `--repeats 3` for its noise).")
    else:
        lines.append("With the global batch kept, one device's best lr should serve every "
                     "worker count, the same optimizer; a larger global batch (per-worker "
                     "batches, `--batch-scaling per-worker`) usually wants a larger lr, by "
                     "the linear scaling rule with warm-up (Goyal et al., 2017), up to the "
                     "gradient noise scale's limit (McCandlish et al., 2018).")
    batch = int(summary["global_batch_size"].min())
    large_batch = noise_scale.large_batch_text(summary, (batch, 16 * batch))
    return lines + ([large_batch] if large_batch else [])


def _forecast(summary: pd.DataFrame, scaling, model: str) -> list[str]:
    if scaling is None:
        return ["No scaling model (see its section): a sweep of two worker counts or more "
                "calibrates one."]
    predictions = scaling.predictions
    predictions = predictions[(predictions["model"] == model)
                              & (predictions["batch_scaling"] == "global")
                              & predictions["num_workers"].isin(FORECAST_WORKERS)]
    if predictions.empty:
        return ["The scaling model has no prediction for this model."]
    sync = summary["sync"].iloc[0]
    predictions = predictions[predictions["sync"] == sync] if (
        predictions["sync"] == sync).any() else predictions
    table = predictions.pivot_table(index="link", columns="num_workers", values="speedup",
                                    sort=False)
    table.columns = [f"k = {k}" for k in table.columns]
    measured = sorted(set(summary["num_workers"]))
    return [f"Predicted speedup of `{model}` (sync {predictions['sync'].iloc[0]}, the global "
            f"batch kept) by the scaling model, from this sweep's 1-worker trial and "
            f"calibration: **a what-if beyond the worker counts measured here "
            f"({', '.join(map(str, measured))})**; on the named links each worker is taken "
            f"to have a device of its own, as fast as this cluster's.",
            markdown_table(table.round(2).reset_index())]


def _one(summary: pd.DataFrame, column: str) -> str:
    values = summary[column].dropna().unique() if column in summary else []
    return ", ".join(map(str, values)) or "?"
