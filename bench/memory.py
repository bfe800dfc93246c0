"""Benchmark 5: peak memory of the driver and of each worker in a 2-worker trial.

Workers map Fashion-MNIST from Ray's object store (read-only, zero-copy), so
the data set should sit in shared memory once per node, not in each worker's
private memory. Linux only: worker memory is sampled from /proc/<pid>/smaps_rollup
every 0.2 s while the trial runs: RSS (shared pages counted in full), PSS
(shared pages split between their users) and USS (private pages).

    python bench/memory.py [--epochs 2]
"""

import argparse
import os
import resource
import sys
import tempfile
import threading
from pathlib import Path

import ray

sys.path.insert(0, os.path.dirname(__file__))
from common import command_line, emit  # noqa: E402

from orchestrator.driver import cluster as ray_cluster  # noqa: E402
from orchestrator.training import data  # noqa: E402
from orchestrator.config.options import TrainConfig  # noqa: E402
from orchestrator.driver.trial import run_trial  # noqa: E402

MB = 1024 * 1024


def _worker_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"ray::RayTrainWorker" in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _memory_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0])
    return {"rss": fields["Rss"], "pss": fields["Pss"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    ray_cluster.connect(None)
    dataset = data.load()
    dataset_mb = sum(array.nbytes for array in vars(dataset).values()) / MB
    data_ref = ray.put(dataset)
    del dataset
    peaks: dict[int, dict[str, int]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            for pid in _worker_pids():
                try:
                    now = _memory_kb(pid)
                except OSError:
                    continue
                peak = peaks.setdefault(pid, now)
                peaks[pid] = {key: max(peak[key], now[key]) for key in now}

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    config = TrainConfig(model="lenet", num_workers=2, global_batch_size=256, lr=0.2,
                         num_epochs=args.epochs, sync="bucketed")
    with tempfile.TemporaryDirectory() as storage:
        run_trial(config, data_ref, name="memory", storage_path=storage)
    done.set()
    sampler.join()
    ray.shutdown()
    workers = sorted(peaks.values(), key=lambda peak: -peak["rss"])[:2]
    emit("memory", command_line(), {
        "dataset_mb": dataset_mb,
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": [round(peak["rss"] / 1024) for peak in workers],
        "worker_peak_pss_mb": [round(peak["pss"] / 1024) for peak in workers],
        "worker_peak_uss_mb": [round(peak["uss"] / 1024) for peak in workers],
    })


if __name__ == "__main__":
    main()
