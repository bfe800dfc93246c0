"""Benchmark: how reproducible the calibration's per-size timings are, timed as
the calibration does, each size in one burst of its own, and as a candidate
does, in passes over every transport and size (`in_passes`).

Two gloo processes on this machine time the group's allreduce and the book's
root allreduce at the calibration's sizes for LeNet (1 KB to 1 MB), back to
back ("allreduce") and each call right after a forward and backward
("first_call"), with the calibration's own functions for bursts and the
candidate's below, as many calls each. Each run times both ways, their order
alternating from run to run, in the same processes. For each (kind,
transport, size): the spread of the runs' medians (largest over smallest); a
run's value is an outlier where it is over 1.5x that size's median over the
runs, and a curve (a run's sizes of one kind and transport) is in a spell
where half its sizes or more are outliers: the scaling model's fit
(report/costs.py) outvotes an outlying size, not a spell.

    python bench/calibration_passes.py [--runs 16] [--rows FILE] [--no-append]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import REPO, command_line, emit, free_port  # noqa: E402

sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.training import calibration, step_probes  # noqa: E402
from orchestrator.training.recipe import model_of  # noqa: E402
from orchestrator.training.sync.base import group_transport, root_transport  # noqa: E402
from orchestrator.training.sync.collectives import (allreduce_, get_rank,  # noqa: E402
                                                    get_world_size)

OUTLIER = 1.5
PASSES = 3
METHODS = ("one_burst", "in_passes")


def in_passes(collectives: dict, sizes: list[int], device, after_backward) -> dict:
    """The candidate: each collective (name: in-place allreduce) at each of `sizes`,
    timed back to back and as a step's first sum, in PASSES passes, the
    transports' and sizes' order reversed every other pass, each pass's
    back-to-back calls of every transport and size followed by its first calls
    (so that a size's passes lie a pass's first calls apart, about 0.4 s for
    LeNet's). As many calls as the calibration's bursts make: back to back,
    REPEATS // PASSES a visit after one untimed; first calls, two a visit, the
    first pass's first untimed; each first call's least time over the workers.
    {(kind, transport): each size's median seconds over every pass's calls}."""
    visits = [(name, index) for name in collectives for index in range(len(sizes))]
    tensors = {size: calibration._message(size, device) for size in sizes}
    per_pass = calibration.REPEATS // PASSES
    first_per_pass = -(-(calibration.FIRST_CALL_REPEATS + 1) // PASSES)
    back_to_back = {visit: [] for visit in visits}
    first = torch.zeros(len(visits), PASSES, first_per_pass, get_world_size(),
                        dtype=torch.float64)
    for number in range(PASSES):
        order = list(enumerate(visits))[::-1 if number % 2 else 1]
        for _, (name, index) in order:
            tensor = tensors[sizes[index]].fill_(1.0)
            calls = [_timed_call(collectives[name], tensor) for _ in range(per_pass + 1)]
            back_to_back[name, index] += calls[1:]
        for row, (name, index) in order:
            tensor = tensors[sizes[index]].fill_(1.0)
            for call in range(first_per_pass):
                after_backward()
                first[row, number, call, get_rank()] = _timed_call(collectives[name], tensor)
    least = allreduce_(first).min(dim=3).values.flatten(1)[:, 1:]  # first pass's first dropped
    timed: dict = {}
    for row, (name, index) in enumerate(visits):
        timed.setdefault(("allreduce", name), []).append(
            statistics.median(back_to_back[name, index]))
        timed.setdefault(("first_call", name), []).append(statistics.median(least[row].tolist()))
    return timed


def _timed_call(collective, tensor: torch.Tensor) -> float:
    started = time.perf_counter()
    collective(tensor)
    return time.perf_counter() - started


def one_burst(collectives: dict, sizes: list[int], device, after_backward) -> dict:
    """The calibration's own timing: each size in one burst of its own."""
    timed: dict = {}
    for name, collective in collectives.items():
        for size in sizes:
            timed.setdefault(("allreduce", name), []).append(
                calibration._collective_s(collective, size, device))
            timed.setdefault(("first_call", name), []).append(
                calibration._first_call_s(collective, size, device, after_backward))
    return timed


def _body(rank: int, port: int, runs: int, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    device = torch.device("cpu")
    config = TrainConfig(num_workers=2)
    model = model_of(config)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sizes = calibration._sizes(calibration.largest_message(param_bytes, []))
    after_backward = step_probes.train_step(model, config, device,
                                            config.global_batch_size // 2)
    transports = {"gloo": group_transport().allreduce_, "gloo root": root_transport().allreduce_}
    rows = []
    for run in range(runs):
        for method in METHODS if run % 2 == 0 else METHODS[::-1]:
            timed = {"one_burst": one_burst, "in_passes": in_passes}[method](
                transports, sizes, device, after_backward)
            rows += [(run, method, kind, name, size, seconds)
                     for (kind, name), values in timed.items()
                     for size, seconds in zip(sizes, values)]
    if rank == 0:
        results.extend(rows)
    dist.destroy_process_group()


def summarize(rows: list[tuple]) -> dict:
    """Per method and kind: the median and largest spread (largest run over
    smallest) of a size's medians, how many of the runs' values are outliers, and
    how many curves are in a spell."""
    groups: dict[tuple, list[float]] = {}
    for run, method, kind, name, size, seconds in rows:
        groups.setdefault((method, kind, name, size), []).append(seconds)
    middles = {key: statistics.median(seconds) for key, seconds in groups.items()}
    curves: dict[tuple, list[bool]] = {}
    for run, method, kind, name, size, seconds in rows:
        curves.setdefault((method, kind, run, name), []).append(
            seconds > OUTLIER * middles[method, kind, name, size])
    figures: dict = {}
    for (method, kind, name, size), seconds in groups.items():
        figure = figures.setdefault(method, {}).setdefault(
            kind, {"spreads": [], "outliers": 0, "values": 0})
        figure["spreads"].append(max(seconds) / min(seconds))
        figure["outliers"] += sum(value > OUTLIER * middles[method, kind, name, size]
                                  for value in seconds)
        figure["values"] += len(seconds)
    for method, kinds in figures.items():
        for kind, figure in kinds.items():
            spreads = figure.pop("spreads")
            own = [flags for (m, k, _, _), flags in curves.items() if (m, k) == (method, kind)]
            figure.update(median_spread=round(statistics.median(spreads), 3),
                          largest_spread=round(max(spreads), 3),
                          curves=len(own),
                          curves_in_a_spell=sum(2 * sum(flags) >= len(flags) for flags in own))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--rows", help="also write every (run, method, kind, transport, "
                        "bytes, seconds) to this JSON file")
    parser.add_argument("--no-append", action="store_true",
                        help="print the BENCH line without appending it to bench/results")
    args = parser.parse_args()
    with mp.Manager() as manager:
        results = manager.list()
        started = time.perf_counter()
        mp.spawn(_body, args=(free_port(), args.runs, results), nprocs=2)
        rows = list(results)
    figures = summarize(rows)
    if args.rows:
        with open(args.rows, "w") as out:
            json.dump(rows, out)
    emit("calibration_passes", command_line(), {
        "runs": args.runs, "workers": 2, "passes_per_size": PASSES,
        "sizes": sorted({row[4] for row in rows}), **figures,
        **{f"{kind}_outliers_in_passes_over_one_burst":
           (round(figures["in_passes"][kind]["outliers"]
                  / figures["one_burst"][kind]["outliers"], 3)
            if figures["one_burst"][kind]["outliers"] else None)
           for kind in ("allreduce", "first_call")},
        "seconds": round(time.perf_counter() - started, 1)}, append=not args.no_append)


if __name__ == "__main__":
    main()
