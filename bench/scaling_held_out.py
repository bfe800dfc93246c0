"""Benchmark: the scaling model on worker counts it was not fitted on.

On a one-machine cluster of 1-CPU nodes whose links are capped (`--rate`, tc
tbf; tools/netns_cluster.py, root), two sweeps of the same training run one
after the other, their trials one at a time, every worker on a node of its
own, summing over gloo's TCP (`--sync`: gloo's ring, `bucketed`, and the book's
root funnel, `root`, by default):

- A, the fit: 1 and 2 workers. Its calibration times the allreduce at k = 2
  over the capped link (alpha and beta are fitted there) and the compute probe
  at 1 and 2 workers; its 1-worker trial is the baseline.
- B, the held-out points: 1, 3 and 4 workers. Of B the model reads only its
  calibration's compute probe at 3 and 4 (how much 3 and 4 workers computing at
  once slow each other on this machine's 2 cores, scaled by B's own 1-worker
  probe to A's); B's allreduce samples, its trials' compute seconds and its
  1-worker trial are not read.

The model predicts each of B's 3- and 4-worker epochs from A alone; the error
per point is (predicted - measured) / measured. Target: within 15% per point.

    python bench/scaling_held_out.py [--rate 50mbit] [--sync bucketed,root] [--keep DIR]
    python bench/scaling_held_out.py --analyse DIR    # re-model what --keep kept
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, os.path.dirname(__file__))
from common import REPO, command_line, emit  # noqa: E402

from orchestrator.report.answers.sheet import VALIDATION_TARGET  # noqa: E402
from orchestrator.report.scaling_model import fit_and_validate  # noqa: E402

FIT_WORKERS, HELD_OUT_WORKERS = (1, 2), (3, 4)


def run_sweep(cluster, folder: Path, name: str, workers: tuple[int, ...], args) -> Path:
    out_dir = folder / name
    run = cluster.run_in("head", [
        sys.executable, "experiments/sweep.py", "--address", cluster.head_address,
        "--workers", ",".join(map(str, workers)), "--sync", args.sync, "--lr", "0.1",
        "--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
        "--train-limit", str(args.train_limit), "--test-limit", "1000",
        # One layout in both sweeps: auto times it per node, and might not agree.
        "--memory-format", "channels-last",
        # One trial at a time: the nodes share this machine's 2 cores, and trials
        # on disjoint nodes would run side by side (as on a real cluster they may).
        "--max-concurrent-trials", "1",
        "--out", str(out_dir), "--storage", str(folder / f"{name}-storage")],
        cwd=REPO, timeout=1800)
    if run.returncode != 0:
        sys.exit(run.stdout[-3000:] + run.stderr[-3000:])
    return out_dir


def read(out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    return (pd.read_csv(out_dir / "trials.csv"), pd.read_csv(out_dir / "epochs.csv"),
            json.loads((out_dir / "calibration.json").read_text()))


def fit_calibration(fit: dict, held_out: dict) -> dict:
    """A's calibration, with B's compute probe for the worker counts A did not run,
    each scaled by the two probes' 1-worker figures (the sweeps ran minutes apart)."""
    fit_probe = {int(c["num_workers"]): c for c in fit["compute"]}
    other_probe = {int(c["num_workers"]): c for c in held_out["compute"]}
    scale = fit_probe[1]["seconds_per_example"] / other_probe[1]["seconds_per_example"]
    added = [{**entry, "seconds_per_example": entry["seconds_per_example"] * scale}
             for count, entry in sorted(other_probe.items()) if count not in fit_probe]
    return {**fit, "compute": sorted([*fit_probe.values(), *added],
                                     key=lambda entry: entry["num_workers"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", default="50mbit", help="every node's link (tc's units)")
    parser.add_argument("--sync", default="bucketed,root", help="one or several, as sweep.py's")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-limit", type=int, default=6000)
    parser.add_argument("--keep", type=Path, help="copy the two sweeps' folders here")
    parser.add_argument("--analyse", type=Path,
                        help="model the two sweeps a --keep kept, without running any "
                             "(its line is printed, not recorded)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tools"))
    import netns_cluster

    started = time.monotonic()
    nodes = max(HELD_OUT_WORKERS)
    if args.analyse:  # two sweeps kept by an earlier --keep: no cluster, nothing run
        (fit_trials, fit_epochs, fit_cal), (held_trials, held_epochs, held_cal) = (
            read(args.analyse / name) for name in ("fit", "held-out"))
    else:
        with tempfile.TemporaryDirectory() as temp, \
                netns_cluster.netns_cluster(nodes + 1, 1, head_cpus=0, rate=args.rate) as cluster:
            folder = Path(temp)
            fit_dir = run_sweep(cluster, folder, "fit", FIT_WORKERS, args)
            held_dir = run_sweep(cluster, folder, "held-out", (1, *HELD_OUT_WORKERS), args)
            fit_trials, fit_epochs, fit_cal = read(fit_dir)
            held_trials, held_epochs, held_cal = read(held_dir)
            if args.keep:
                for folder in (fit_dir, held_dir):
                    shutil.copytree(folder, args.keep / folder.name, dirs_exist_ok=True)
    held_single = held_trials[held_trials["num_workers"] == 1]
    summary = pd.concat([fit_trials, held_trials[held_trials["num_workers"] > 1]],
                        ignore_index=True)
    epochs = pd.concat([fit_epochs, held_epochs[~held_epochs["trial_id"].isin(
        held_single["trial_id"])]], ignore_index=True)
    calibration = fit_calibration(fit_cal, held_cal)
    assert {int(s["num_workers"]) for s in calibration["allreduce"]} == {2}
    result = fit_and_validate(summary, epochs, calibration)
    if result is None or result.validation.empty:
        sys.exit("no trial to validate the model on")
    validation = result.validation.sort_values("num_workers")
    held = validation[validation["held_out"]]
    points = {f"{row.sync} {row.num_workers}w ({'held out' if row.held_out else 'fitted k'})": {
        "measured_epoch_s": round(row.measured_epoch_s, 3),
        "predicted_epoch_s": round(row.predicted_epoch_s, 3), "error": round(row.error, 4),
        "contention": round(row.contention, 3), "contention_source": row.contention_source,
        **{name: round(getattr(row, name), 3) for name in (
            "measured_compute_s", "predicted_compute_s", "measured_sync_s", "predicted_comm_s")}}
        for row in validation.itertuples()}
    worst = float(held["error"].abs().max()) if len(held) else None
    single_s = {f"{name} {row.sync}": round(float(row.mean_epoch_time_s), 3)
                for name, trials in (("fit", fit_trials), ("held_out", held_single))
                for row in trials[trials["num_workers"] == 1].itertuples()}
    link = result.links[result.links["link"].str.contains("measured")]
    emit("scaling_held_out", command_line(), append=args.analyse is None, figures={
        "cluster": f"head (0 CPUs) + {nodes} nodes x 1 CPU, netns, links {args.rate}",
        "sync": args.sync, "transport": sorted(set(validation["transport"])),
        "fitted_at_workers": 2, "held_out_workers": list(HELD_OUT_WORKERS),
        "points": points, "held_out_max_abs_error": worst,
        "links": {row.link: {"alpha_us": round(row.alpha_s * 1e6, 1),
                             "beta_MB_per_s": round(row.beta_bytes_per_s / 1e6, 2)}
                  for row in link.itertuples()},
        "one_worker_epoch_s_fit_vs_held_out_sweep": single_s,
        "wall_s": round(time.monotonic() - started, 1),
        "target": f"held-out points within {VALIDATION_TARGET:.0%}",
        "target_met": worst is not None and worst <= VALIDATION_TARGET,
        **({"analysed": str(args.analyse)} if args.analyse else {})})


if __name__ == "__main__":
    main()
