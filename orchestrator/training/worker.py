"""The Ray Train entry point: what runs on each worker around the loop of loop.py.

`train_loop_per_worker` takes the config and the data from the driver,
resumes from Ray's checkpoint, and reports each epoch to Ray Train with a
checkpoint; the loop itself (`orchestrator.loop.run_training`) needs no Ray.
`calibration_loop_per_worker` runs the sweep's microbenchmark (calibration.py).
"""

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ray
import ray.train
import ray.train.torch
import torch

from orchestrator.driver import device_check
from orchestrator.training import calibration
from orchestrator import ray_fastpath
from orchestrator.training.checkpoint import load_checkpoint, save_checkpoint
from orchestrator.training.sync.collectives import get_rank
from orchestrator.config.options import TrainConfig
from orchestrator.training.data import Images
from orchestrator.training.loop import run_training
from orchestrator.training.profiling import trace_name

# Ray starts its worker processes at this niceness (its `worker_niceness` setting).
RAY_WORKER_NICENESS = 15


def train_loop_per_worker(loop_config: dict) -> list[dict]:
    """Ray Train entry point: config and data come from the driver via the object store."""
    config = TrainConfig(**loop_config["train_config"])
    if config.pin_cores:
        pin_to_own_cores(ray.train.get_context().get_local_rank(), config.threads_per_worker)
    torch.set_num_threads(config.threads_per_worker)
    ray_fastpath.prepare_worker_process()
    device = usable_device(ray.train.torch.get_device())
    data: Images = ray.get(loop_config["data"])
    checkpoint = ray.train.get_checkpoint()
    resume_from = None
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            resume_from = load_checkpoint(Path(folder))
    # The driver's job on this node's Ray: one sweep (an embedded Ray numbers
    # its jobs afresh each start, its node id is new).
    context = ray.get_runtime_context()
    return run_training(config, data, device=device,
                        report=report_to_ray, resume_from=resume_from,
                        started_at=loop_config["started_at"],
                        node_id=context.get_node_id(),
                        layout_scope=f"job {context.get_job_id()} on {context.get_node_id()}",
                        stop_at=loop_config.get("stop_at"),
                        graph_held_off=loop_config.get("graph_held_off"),
                        keep_trace=keep_trace_in_run_folder)


def calibration_loop_per_worker(loop_config: dict) -> dict:
    """Ray Train entry point of the microbenchmark; rank 0's result is the run's."""
    config = TrainConfig(**loop_config["train_config"])
    torch.set_num_threads(config.threads_per_worker)
    ray_fastpath.prepare_worker_process()
    return calibration.measure(config, usable_device(ray.train.torch.get_device()),
                               worker_counts=tuple(loop_config["worker_counts"]),
                               transports=tuple(loop_config["transports"]),
                               layouts=tuple(loop_config["layouts"]),
                               sharded=loop_config["sharded"],
                               probes=tuple(map(tuple, loop_config.get("probes", ()))))


def keep_trace_in_run_folder(local: str, rank: int) -> str:
    """A worker's profiled steps' trace (`--profile-steps`), moved into its Train
    run's folder in the run's storage (a local folder, NFS or a bucket alike), under
    profile/; returns where it went. Through Ray Train's storage context
    (`get_storage()`, a DeveloperAPI): where that fails, the trace stays where it
    is, on this worker's node, and the place says so."""
    try:
        storage = ray.train.get_context().get_storage()
        folder = f"{storage.experiment_fs_path}/profile"
        storage.storage_filesystem.create_dir(folder)
        target = f"{folder}/{trace_name(rank)}"
        with open(local, "rb") as source, \
                storage.storage_filesystem.open_output_stream(
                    target, compression=None) as stream:  # gzipped already: as it is
            shutil.copyfileobj(source, stream)
    except Exception as error:  # noqa: BLE001 - any failure keeps the local trace
        node = ray.util.get_node_ip_address() if ray.is_initialized() else platform.node()
        return f"{local} on {node} (not moved to the run's storage: {error})"
    shutil.rmtree(Path(local).parent, ignore_errors=True)  # the trace's own folder
    # A bucket's path has no scheme of its own; any other filesystem's is its path.
    scheme = storage.storage_filesystem.type_name
    return f"{scheme}://{target}" if scheme in ("s3", "gcs", "hdfs") else target


def usable_device(device: torch.device) -> torch.device:
    """`device`, Ray Train's choice for this worker, once torch can use it: the
    driver's node check (driver/device_check.py) refuses a GPU node whose torch
    cannot, before a run starts. Workers that share a GPU (gloo) on a node that
    joined since, or whose GPUs the check could not reach, are stopped here, in one
    error with the ways out; whole-GPU workers' NCCL group, which Ray Train makes
    before this runs, fails first, in NCCL's words."""
    if device.type != "cuda":
        return device
    cause = device_check.cuda_unusable()
    if cause is None:
        return device
    raise RuntimeError(f"Ray gave this worker a GPU, but {cause}: {device_check.WAYS_OUT}")


def pin_to_own_cores(local_rank: int, num_cores: int) -> list[int]:
    """Pin every thread of this process to `num_cores` cores of its own, the
    `local_rank`-th group of the cores the process may use; returns them.

    Workers on one node then never share a core, and a process put on a
    worker's core slows that worker alone: a straggler (bench/straggler.py).
    More workers than groups of cores wrap around.
    """
    allowed = sorted(os.sched_getaffinity(0))
    cores = [allowed[(local_rank * num_cores + i) % len(allowed)] for i in range(num_cores)]
    for thread_id in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread_id), cores)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
    return cores


def busy_process_on(core: int) -> subprocess.Popen:
    """A process that spins on `core` alone, at the niceness Ray gives its workers:
    a worker pinned there (`--pin-cores`) gets about half of that core, a
    straggler at half speed (bench/straggler.py). At the default niceness 0 it
    would leave a niced worker a few percent."""
    niceness = int(os.environ.get("RAY_worker_niceness", RAY_WORKER_NICENESS))
    return subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\n"
                             f"os.nice({niceness})\nwhile True: pass"])


def report_to_ray(metrics: dict, state: dict, history: list[dict],
                  evaluations: list[dict]) -> None:
    """Report an evaluation to Ray Train with a checkpoint from rank 0.

    Ray Train V2 keeps only metrics that come with a checkpoint, and the
    checkpoint is also what a restarted worker group resumes from.
    """
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if get_rank() == 0:
            save_checkpoint(Path(folder), state, history, evaluations)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=checkpoint)
