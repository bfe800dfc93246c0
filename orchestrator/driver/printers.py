"""What a person reads while a run trains: one line per epoch and per mid-epoch
evaluation, printed from Ray Train's controller (records.py formats them)."""

from ray.train import UserCallback

from orchestrator.records import epoch_line, evaluation_line


class EpochPrinter(UserCallback):
    """Prints one line per epoch and per mid-epoch evaluation. Runs in the Ray Train
    controller, whose output Ray forwards to the driver's terminal."""

    def __init__(self, num_epochs: int):
        self.num_epochs = num_epochs

    def after_report(self, run_context, metrics: list[dict], checkpoint) -> None:
        row = metrics[0]
        print(epoch_line(row, self.num_epochs) if row["end_of_epoch"] else evaluation_line(row),
              flush=True)
