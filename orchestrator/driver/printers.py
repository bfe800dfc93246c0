"""What a person reads while a run goes: the epoch line (the book's line: records.py)."""

from ray.train import UserCallback


def epoch_line(metrics: dict, num_epochs: int) -> str:
    return (f"epoch {metrics['epoch']}/{num_epochs}: train loss {metrics['train_loss']:.4f}, "
            f"train acc {metrics['train_acc']:.3f}, test acc {metrics['test_acc']:.3f}, "
            f"{metrics['epoch_time_s']:.2f} s ({metrics['samples_per_s']:.0f} samples/s, "
            f"sync {metrics['sync_time_s']:.2f} s)" + _split_part(metrics)
            + ("  DIVERGED: non-finite gradients" if metrics["status"] == "diverged" else ""))


def _split_part(metrics: dict) -> str:
    """Each worker's share of the global batch and its forward+backward seconds."""
    shares, seconds = metrics["worker_shares"], metrics["worker_compute_s"]
    if len(shares) < 2:
        return ""
    return (f", shares {'/'.join(f'{share:g}' for share in shares)} "
            f"computing {'/'.join(f'{time_s:.2f}' for time_s in seconds)} s")


def evaluation_line(metrics: dict) -> str:
    """A mid-epoch evaluation (--evals-per-epoch)."""
    return (f"  at epoch {metrics['epoch']:.2f}: test acc {metrics['test_acc']:.3f} "
            f"after {metrics['train_s']:.1f} s of training")


class EpochPrinter(UserCallback):
    """Prints one line per epoch and per mid-epoch evaluation. Runs in the Ray Train
    controller, whose output Ray forwards to the driver's terminal."""

    def __init__(self, num_epochs: int):
        self.num_epochs = num_epochs

    def after_report(self, run_context, metrics: list[dict], checkpoint) -> None:
        row = metrics[0]
        print(epoch_line(row, self.num_epochs) if row["end_of_epoch"] else evaluation_line(row),
              flush=True)
