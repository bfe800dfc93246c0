"""Time to accuracy: when a run's test accuracy first reached a target.

An evaluation row (loop.run_training) holds `epoch` (epochs trained, a
fraction mid-epoch), `test_acc`, `train_s` (training seconds so far, no
evaluation in them) and `wall_s` (seconds since the run started: worker
start-up, evaluations and checkpoints included).
"""


def first_reaching(evaluations: list[dict], target_acc: float) -> dict | None:
    """The earliest evaluation at or above `target_acc`; None if none got there."""
    return next((row for row in sorted(evaluations, key=lambda row: row["epoch"])
                 if row["test_acc"] >= target_acc), None)


def target_line(evaluations: list[dict], target_acc: float) -> str:
    """One line on when a run reached `target_acc`, e.g. `reached test acc 0.80 after
    1.75 epochs: 15.7 s of training, 24.1 s from the start`."""
    reached = first_reaching(evaluations, target_acc)
    if reached is None:
        last = max(evaluations, key=lambda row: row["epoch"], default=None)
        return (f"did not reach test acc {target_acc:g}" + (
            f" in {round(last['epoch'], 2):g} epochs ({last['train_s']:.1f} s of training)" if last else ""))
    return (f"reached test acc {target_acc:g} after {round(reached['epoch'], 2):g} epochs: "
            f"{reached['train_s']:.1f} s of training, {reached['wall_s']:.1f} s from the start")
