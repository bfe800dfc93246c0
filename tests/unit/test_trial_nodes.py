"""trials.csv's `nodes`: each trial's node ids, from epochs.csv's `worker_nodes`."""

import pandas as pd

from orchestrator.report.summary import summarize_trials

# trial_id -> each epoch's node id per rank; "t-failed" never finished an epoch.
WORKER_NODES = {
    "t-one": [["node-a"], ["node-a"]],
    "t-two": [["node-b", "node-c"], ["node-b", "node-c"]],
    # Its rank 0 restarted on another node for the second epoch.
    "t-moved": [["node-c", "node-a"], ["node-b", "node-a"]],
}


def _frames(tmp_path, worker_nodes: bool = True) -> tuple[pd.DataFrame, ...]:
    trials = pd.DataFrame([{
        "trial_id": trial_id, "model": "lenet", "sync": "scratch", "split": "even",
        "precision": "fp32", "threads_per_worker": 1, "straggler_slowdown": 1.0,
        "num_workers": 1 if trial_id == "t-one" else 2, "batch_size": 256,
        "batch_scaling": "global", "base_lr": 0.1, "momentum": 0.0, "num_epochs": 2,
        "error": "worker died" if trial_id == "t-failed" else "", "early_stopping": False,
        "stop_at_target": False} for trial_id in [*WORKER_NODES, "t-failed"]])
    epochs = pd.DataFrame([{
        "trial_id": trial_id, "epoch": epoch, "train_loss": 1.0, "test_acc": 0.5,
        "epoch_time_s": 1.0, "eval_time_s": 0.1, "samples_per_s": 100.0, "sync_time_s": 0.0,
        "status": "ok", "worker_nodes": nodes}
        for trial_id, history in WORKER_NODES.items()
        for epoch, nodes in enumerate(history, start=1)])
    if not worker_nodes:
        epochs = epochs.drop(columns="worker_nodes")
    # Read back as the report reads epochs.csv: the lists are then text.
    epochs.to_csv(tmp_path / "epochs.csv", index=False)
    evaluations = pd.DataFrame(columns=["trial_id", "epoch", "test_acc", "train_s", "wall_s"])
    return trials, pd.read_csv(tmp_path / "epochs.csv"), evaluations


def test_nodes_are_each_trials_distinct_node_ids_in_rank_order(tmp_path):
    summary = summarize_trials(*_frames(tmp_path)).set_index("trial_id")
    assert summary.loc["t-one", "nodes"] == "node-a"
    assert summary.loc["t-two", "nodes"] == "node-b node-c"
    assert summary.loc["t-moved", "nodes"] == "node-c node-a node-b"
    assert summary.loc["t-failed", "nodes"] == ""


def test_epochs_recorded_without_worker_nodes_give_empty_nodes(tmp_path):
    summary = summarize_trials(*_frames(tmp_path, worker_nodes=False))
    assert (summary["nodes"] == "").all()
