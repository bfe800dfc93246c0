"""A sweep's trackers (--tracking), read back with each tracker's own reader:
MLflow's client on a SQLite store, TensorBoard's event reader, W&B's offline
run (its .wandb file, records in W&B's own protobuf schema)."""

import json
import os
import struct

import pandas as pd
import pytest

from helpers import run_script


TINY = ["--workers", "1", "--epochs", "2", "--train-limit", "2048", "--test-limit", "500",
        "--batch-size", "64"]


def test_every_epoch_and_the_trials_parameters_reach_each_tracker(tmp_path):
    # On the fast path; tests/cluster/test_ray_fastpath_on_ray.py reads a stock
    # path sweep's epochs back from its TensorBoard events.
    out_dir, mlflow_db, wandb_dir = tmp_path / "out", tmp_path / "store" / "mlflow.db", \
        tmp_path / "wandb"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir)}
    env.pop("WANDB_API_KEY", None)
    run = run_script("sweep.py", *TINY, "--tracking", "mlflow,tensorboard,wandb",
                     "--tracking-uri", f"sqlite:///{mlflow_db}", "--out", str(out_dir),
                     env=env, timeout_s=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    sweep_id = json.loads((out_dir / "sweep.json").read_text())["id"]
    epochs = pd.read_csv(out_dir / "epochs.csv")
    test_acc, (trial_id,) = list(epochs["test_acc"]), set(epochs["trial_id"])
    assert len(test_acc) == 2
    logdir = out_dir / "ray" / sweep_id
    assert f"tensorboard --logdir {logdir}" in run.stdout.splitlines()
    report = (out_dir / "report.md").read_text()
    assert f"- tracking: MLflow: experiment {sweep_id} in sqlite:///{mlflow_db}" in report
    assert f"- tracking: TensorBoard: event files per trial under {logdir}" in report
    assert f"- tracking: W&B: project d2l-ray-orchestrator, group {sweep_id}, offline in " \
           f"{wandb_dir / 'wandb'}" in report

    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name(sweep_id).experiment_id])
    params = mlflow_run.data.params
    assert {name: params[name] for name in ("model", "num_workers", "global_batch_size", "lr",
                                            "sync", "split", "precision")} == {
        "model": "lenet", "num_workers": "1", "global_batch_size": "64", "lr": "0.2",
        "sync": "scratch", "split": "even", "precision": "fp32"}
    history = client.get_metric_history(mlflow_run.info.run_id, "test_acc")
    assert [(metric.step, metric.value) for metric in history] == list(zip([1, 2], test_acc))
    assert len(client.get_metric_history(mlflow_run.info.run_id, "epoch_time_s")) == 2
    # The trial's config is its parameters, never its metrics.
    assert not [key for key in mlflow_run.data.metrics if key.startswith("config")]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    (event_file,) = (logdir / trial_id).glob("events.out.tfevents.*")
    events = EventAccumulator(str(event_file))
    events.Reload()
    scalars = events.Scalars("ray/tune/test_acc")
    assert [event.step for event in scalars] == [1, 2]
    assert [event.value for event in scalars] == pytest.approx(test_acc)

    (wandb_file,) = (wandb_dir / "wandb").glob(f"offline-run-*-{trial_id}/run-{trial_id}.wandb")
    records = _wandb_records(wandb_file.read_bytes())
    (run_record,) = [record.run for record in records if record.HasField("run")]
    assert (run_record.project, run_record.run_group) == ("d2l-ray-orchestrator", sweep_id)
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    assert (config["num_workers"], config["sync"]) == (1, "scratch")
    logged = [{item.key or "/".join(item.nested_key): json.loads(item.value_json)
               for item in record.history.item}
              for record in records if record.HasField("history")]
    assert [row["test_acc"] for row in logged] == pytest.approx(test_acc)
    assert [row["epoch"] for row in logged] == [1, 2]


def _wandb_records(data: bytes) -> list:
    """The records of a .wandb file: W&B's 7-byte header, then a LevelDB log
    (32 KiB blocks of chunks: crc32c, length, type; a record may span blocks)."""
    from wandb.proto.wandb_internal_pb2 import Record
    assert data[:4] == b":W&B"
    block_size, chunk_header, full, first, last = 32768, 7, 1, 2, 4
    records, pending, offset = [], b"", 7
    while offset + chunk_header <= len(data):
        if block_size - offset % block_size < chunk_header:  # a block's zero padding
            offset += block_size - offset % block_size
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + chunk_header])
        chunk = data[offset + chunk_header:offset + chunk_header + length]
        offset += chunk_header + length
        pending = chunk if kind in (full, first) else pending + chunk
        if kind in (full, last):
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
    return records
