"""Benchmark 8: the scaling model validated on a finished sweep (`--preset exercises`,
or the quickstart's two trials).

Each measured multi-worker trial of the sweep (even split, no straggler) is
predicted from its 1-worker trial and the sweep's microbenchmark
(calibration.json) alone, and compared with its measured seconds per epoch.
Figures: the error per point, the largest, the fitted alpha and beta of each
transport, the measured contention, and the model's speedup at 16 workers.
Target: at most 15% error on every measured point. The record's machine is the
processor the sweep calibrated on (calibration.json), where it says. Where the
calibration timed each sum right after a backward too ("first_call"), the
communication's error per strategy is given both ways on the same sweep: every
sum back to back (one regime), and a step's first sum after a backward (two).

    python experiments/sweep.py --preset exercises --out results/exercises
    python bench/scaling_model.py --sweep results/exercises
"""

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit  # noqa: E402

from orchestrator.report.answers.sheet import VALIDATION_TARGET  # noqa: E402
from orchestrator.report.costs import contention, sample_model  # noqa: E402
from orchestrator.report.scaling_model import fit_and_validate  # noqa: E402


def _contentions(calibration: dict, validation: pd.DataFrame) -> list[tuple]:
    """(model, k, the trials' own median contention or None) for each probed model
    and worker count."""
    rows = []
    for sample in calibration["compute"]:
        model, k = sample_model(calibration, sample), int(sample["num_workers"])
        own = validation[(validation["model"] == model) & (validation["num_workers"] == k)]
        rows.append((model, k, float(own["measured_contention"].median()) if len(own) else None))
    return rows


def _comm_errors(validation: pd.DataFrame) -> dict:
    """The communication's error per strategy: its median and range over the points."""
    return {sync: {"median": round(float(errors.median()), 3),
                   "range": [round(float(errors.min()), 3), round(float(errors.max()), 3)]}
            for sync, errors in validation.groupby("sync")["comm_error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", required=True, type=Path,
                        help="folder of a finished sweep with 1- and multi-worker trials")
    args = parser.parse_args()
    calibration = json.loads((args.sweep / "calibration.json").read_text())
    summary = pd.read_csv(args.sweep / "trials.csv")
    epochs = pd.read_csv(args.sweep / "epochs.csv")
    result = fit_and_validate(summary, epochs, calibration)
    if result is None or result.validation.empty:
        sys.exit(f"{args.sweep}: no multi-worker trial to validate the model on")
    validation = result.validation
    points = {f"{row.sync} {row.num_workers}w b{row.global_batch_size} ({row.trial_id})":
              round(row.error, 4) for row in validation.itertuples()}
    worst = float(validation["error"].abs().max())
    at_16 = result.predictions[result.predictions["num_workers"] == 16]
    regimes = {}
    if "first_call" in calibration:
        one = fit_and_validate(summary, epochs, {key: value for key, value in calibration.items()
                                                 if key != "first_call"})
        regimes = {"comm_error_one_regime": _comm_errors(one.validation),
                   "comm_error_two_regimes": _comm_errors(validation),
                   "max_abs_error_one_regime": float(one.validation["error"].abs().max())}
    sweep_line = next(line for line in (args.sweep / "report.md").read_text().splitlines()
                      if line.startswith("- sweep wall time"))
    emit("scaling_model", command_line(), measured_on=calibration.get("processor"), figures={
        "sweep": str(args.sweep), "sweep_wall_time": sweep_line.split(": ", 1)[1],
        "sweep_ended": json.loads((args.sweep / "sessions.json").read_text())[0]["ended"],
        "trials": len(summary), "measured_points": len(validation), "max_abs_error": worst,
        "target_max_abs_error": VALIDATION_TARGET, "target_met": worst <= VALIDATION_TARGET,
        "error_per_point": points, **regimes,
        "links": {row.link: {"alpha_us": round(row.alpha_s * 1e6, 2),
                             "beta_GB_per_s": round(row.beta_bytes_per_s / 1e9, 3),
                             **({"first_call_alpha_us": round(row.first_alpha_s * 1e6, 2),
                                 "first_call_beta_GB_per_s":
                                     round(row.first_beta_bytes_per_s / 1e9, 3)}
                                if row.first_alpha_s == row.first_alpha_s else {})}
                  for row in result.links.itertuples() if "measured" in row.link},
        # The probe's, per model it probed (one model before 2026-11-26), and the
        # trials' own beside it: the median per model and worker count.
        "contention": {f"{model} {k}w": {"probe": round(contention(calibration, k, model), 3),
                                         **({"trials": round(trials, 3)} if trials else {})}
                       for model, k, trials in _contentions(calibration, validation)},
        "predicted_speedup_at_16_bucketed": {f"{row.link}, {row.batch_scaling} batch":
                                             round(row.speedup, 2)
                                             for row in at_16.itertuples()
                                             if row.sync == "bucketed"},
    })


if __name__ == "__main__":
    main()
