"""What a run or a sweep will do on the cluster, decided once and passed down whole.

`fit_to_cluster` settles what the checked request (checks.py) leaves to the
cluster once it is known: GPUs or not, worker counts a preset leaves open,
room for every grid point, how many trials run at once.
"""

import dataclasses
from dataclasses import dataclass

from orchestrator.driver import placement
from orchestrator.driver.checks import SweepRequest
from orchestrator.driver.cluster import Cluster
from orchestrator.driver.model_check import require_room_in_memory
from orchestrator.config.options import TrainConfig
from orchestrator.config.grid import SweepConfig
from orchestrator.errors import UserError
from orchestrator.records import LeftOut, counted


@dataclass(frozen=True)
class SweepPlan:
    """The request's sweep fitted to the cluster, and how many of its trials run at once."""

    sweep: SweepConfig
    max_concurrent_trials: int
    side_by_side: bool
    """Trials may share a node while timed: their epoch times, and any speedup, compare crowded runs."""
    placements: dict[int, placement.Placement] | None = None
    """Per worker count, whole nodes of its own for each trial (placement.py);
    None: Ray places the workers where they fit."""
    placement_nodes: int | None = None
    """With `placements`: the like nodes the trials share out."""
    left_out: tuple[LeftOut, ...] = ()
    """The preset's points this cluster cannot hold: not run."""
    pinned: bool = False
    """Trials that would share a node run one at a time, their workers pinned to cores
    by local rank (`--pin-cores`)."""
    shared_gpu: bool = False
    """The exercises on a cluster of one GPU: their k workers share it (`shares_one_gpu`)."""
    held_back: int | None = None
    """The --max-concurrent-trials asked for, where the cluster holds fewer of the
    sweep's smallest trials at once (`max_concurrent_trials` is what it holds)."""


def fit_to_cluster(request: SweepRequest, cluster: Cluster) -> SweepPlan:
    """Settle GPUs and open worker counts; leave out a preset's points the cluster can
    never hold, and refuse the user's."""
    sweep, left_out = request.sweep, request.left_out
    if request.gpu_from_cluster:
        sweep = with_gpu_from_cluster(sweep, cluster)
    _refuse_pinned_gpu_workers(sweep.base)
    if request.workers_from_cluster and shares_one_gpu(sweep, cluster):
        # The exercises compare accuracies at 2 workers: on one GPU, two halves of it.
        sweep = dataclasses.replace(
            sweep, workers=(1, SHARED_GPU_WORKERS),
            base=dataclasses.replace(sweep.base, gpus_per_worker=1 / SHARED_GPU_WORKERS))
    elif request.workers_from_cluster:
        # Up to the devices there are: GPU workers' counts follow the GPUs, and those
        # the CPUs cannot hold besides are left out below, named (8 GPUs, 4 CPUs).
        resources = sweep.base.resources_per_worker
        capacity = cluster.max_workers(resources)
        devices = (cluster.max_workers({"GPU": resources["GPU"]}) if sweep.base.use_gpu
                   else capacity)
        counts = workers_up_to(max(capacity, 1))
        sweep = dataclasses.replace(sweep, workers=counts + ((devices,) if devices > counts[-1]
                                                             else ()))
    if sweep.baseline_threads is None:  # the preset's: a node's CPUs, on a CPU cluster
        node_cpus = max(int(node.get("CPU", 0)) for node in cluster.node_resources)
        sweep = dataclasses.replace(sweep, baseline_threads=0 if sweep.base.use_gpu else node_cpus)
    if not request.workers_given:
        sweep, left_out = _leave_out_what_cannot_fit(sweep, cluster)
    for point in sweep.grid:
        cluster.require_room(point.train.num_workers, point.train.resources_per_worker,
                             what=f"the grid point with {point.train.num_workers} workers")
    require_room_in_memory([point.train for point in sweep.grid], cluster)
    # Said in the plan however the halves came: here, `--gpus-per-worker`, or a resumed
    # sweep's (sweep.json keeps the fitted sweep).
    shared_gpu = (sweep.study == "exercises" and sweep.base.use_gpu
                  and sweep.base.two_fit_one_gpu and max(sweep.workers) > 1
                  and cluster.max_workers({"GPU": 1.0}) == 1)
    return dataclasses.replace(_concurrency(request, cluster, sweep, left_out),
                               shared_gpu=shared_gpu)


# The exercises' workers on a cluster of one GPU: two, each half of it.
SHARED_GPU_WORKERS = 2


def shares_one_gpu(sweep: SweepConfig, cluster: Cluster) -> bool:
    """Whether the exercises (their worker counts from the cluster, one GPU each) meet a
    cluster that holds one GPU worker but two on half a GPU each: there their
    accuracy questions are answered by two workers sharing the GPU (over gloo), and
    no speedup is read from them (report/summary.shared_gpu_trials)."""
    base = sweep.base
    if sweep.study != "exercises" or not base.use_gpu or base.gpus_per_worker != 1:
        return False
    half = {**base.resources_per_worker, "GPU": 1 / SHARED_GPU_WORKERS}
    return (cluster.max_workers(base.resources_per_worker) == 1
            and cluster.max_workers(half) >= SHARED_GPU_WORKERS)


def _concurrency(request: SweepRequest, cluster: Cluster, sweep: SweepConfig,
                 left_out: tuple[LeftOut, ...]) -> SweepPlan:
    """How many trials run at once, and where, for a sweep that fits the cluster."""
    resources = sweep.base.resources_per_worker
    worker_counts = sorted({point.train.num_workers for point in sweep.grid})
    placements = _node_exclusive(cluster, worker_counts, resources)
    fits = max(1, cluster.max_workers(resources) // worker_counts[-1])
    # One worker count reports no speedup: its trials pack where packing runs more
    # at once than whole nodes do (two nodes of 8 GPUs: 16 one-GPU trials, not 2).
    packs = len(worker_counts) == 1 and placements is not None and fits > placements[0]
    if request.max_concurrent_trials is None and placements is not None and not packs:
        # Every trial on whole nodes of its own: as many at once as there are nodes.
        return SweepPlan(sweep=sweep, max_concurrent_trials=min(placements[0], len(sweep.grid)),
                         side_by_side=False, placements=placements[1],
                         placement_nodes=placements[0], left_out=left_out)
    # Trials on one node share its cores, memory bandwidth and PCIe: a speedup
    # (more than one worker count) is measured one trial at a time, unless
    # every node holds one worker at most, so that no two trials share one.
    whole_nodes = max(cluster.node_capacities(resources)) <= 1
    isolated = fits if whole_nodes or len(worker_counts) == 1 else 1
    # No more than the cluster holds of its smallest trials (8 GPUs: one 8-worker trial).
    room = max(1, cluster.max_workers(resources) // worker_counts[0])
    asked = request.max_concurrent_trials
    concurrent = min(asked or isolated, len(sweep.grid), room)
    held_back = asked if asked and room < min(asked, len(sweep.grid)) else None
    side_by_side = concurrent > 1 and not whole_nodes
    if side_by_side and sweep.base.pin_cores:
        # Every trial counts its local ranks from 0, and Ray pins no trial's cores: two
        # trials on one node would pin their workers to the same ones.
        if request.max_concurrent_trials:
            raise UserError(
                f"--pin-cores pins each worker to cores chosen by its local rank, which "
                f"every trial counts from 0: {concurrent} trials side by side on a node "
                f"would share them; drop --max-concurrent-trials or --pin-cores")
        return SweepPlan(sweep=sweep, max_concurrent_trials=1, side_by_side=False,
                         left_out=left_out, pinned=True)
    return SweepPlan(sweep=sweep, max_concurrent_trials=concurrent,
                     side_by_side=side_by_side, left_out=left_out, held_back=held_back)


def _leave_out_what_cannot_fit(sweep: SweepConfig, cluster: Cluster
                               ) -> tuple[SweepConfig, tuple[LeftOut, ...]]:
    """The preset's worker counts the cluster can hold, and a `LeftOut` for each
    point of the others (d2l-13.5's 2 workers on a machine of one GPU). When none
    fits, the sweep is left whole, for `require_room` to refuse."""
    resources = sweep.base.resources_per_worker
    capacity = cluster.max_workers(resources)
    fitting = tuple(k for k in sweep.workers if k <= capacity)
    if not fitting or len(fitting) == len(sweep.workers):
        return sweep, ()
    cells = {}
    for point in sweep.grid:
        train = point.train
        if train.num_workers > capacity:
            cell = LeftOut(train.num_workers, train.global_batch_size,
                           train.batch_size_per_worker, train.lr, train.model, train.sync,
                           train.precision, train.threads_per_worker, point.part,
                           shortfall(cluster, train.num_workers, train.resources_per_worker))
            cells.setdefault(cell, None)  # the seeds' replicas are one cell
    return dataclasses.replace(sweep, workers=fitting), tuple(cells)


def shortfall(cluster: Cluster, num_workers: int, resources: dict[str, float]) -> str:
    """Why `num_workers` such workers do not fit, in the cluster's scarcer resource:
    "2 workers need 2 GPUs; this cluster has 1: not run"."""
    room = cluster.max_workers(resources)
    units = [unit for unit in ("GPU", "CPU") if resources.get(unit, 0) > 0]
    unit = next((unit for unit in units if cluster.max_workers({unit: resources[unit]}) == room),
                None)
    if unit is None:  # each enough alone, not on the same nodes (the CPUs a head's)
        each = " and ".join(counted(resources[name], name) for name in units)
        return (f"{counted(num_workers, 'worker')} need {each} each on one node; this "
                f"cluster's nodes hold {counted(room, 'such worker')}: not run")
    total = cluster.num_gpus if unit == "GPU" else cluster.num_cpus
    need = (placement.gpus_needed(num_workers, resources[unit]) if unit == "GPU"
            else num_workers * resources[unit])
    # Enough in all, but no node set holds that many whole workers (nodes too small).
    where = f", room for {counted(room, 'such worker')}" if need <= total else ""
    return (f"{counted(num_workers, 'worker')} need {counted(need, unit)}; this cluster has "
            f"{total:g}{where}: not run")


def _node_exclusive(cluster: Cluster, worker_counts: list[int], resources: dict[str, float]
                    ) -> tuple[int, dict[int, placement.Placement]] | None:
    """(the number of nodes, each worker count's placement on whole nodes), on a
    cluster of two or more like nodes that holds every count that way; else None
    (one node, nodes that differ, or a count no even split of whole nodes holds)."""
    alike = placement.alike_nodes(cluster.node_resources, resources)
    if alike is None or alike[1] < 2:
        return None
    node, num_nodes = alike
    placements = {count: placement.whole_nodes(node, num_nodes, count, resources)
                  for count in worker_counts}
    if None in placements.values():
        return None
    return num_nodes, placements


def fit_run_to_cluster(config: TrainConfig, gpu_from_cluster: bool,
                       cluster: Cluster) -> TrainConfig:
    """train.py's run with its GPU use settled; refused if the cluster can never hold it."""
    if gpu_from_cluster:
        config = with_gpu_from_cluster(config, cluster)
    _refuse_pinned_gpu_workers(config)
    cluster.require_room(config.num_workers, config.resources_per_worker)
    require_room_in_memory([config], cluster)
    return config


def _refuse_pinned_gpu_workers(config: TrainConfig) -> None:
    """`--pin-cores` is for CPU workers: it pins a worker's every thread to cores
    chosen by its local rank, blind to which CPUs sit near its GPU, and the threads
    of its sums (NCCL's, or gloo's where workers share a GPU), started later, would
    inherit them and share the training thread's."""
    if config.use_gpu and config.pin_cores:
        raise UserError("--pin-cores pins CPU workers to cores by local rank; GPU workers' "
                        "communication threads (NCCL's, gloo's) would share their training "
                        "thread's cores, whatever CPUs sit near their GPU: drop --pin-cores, "
                        "or --use-gpu no")


def with_gpu_from_cluster(config, cluster: Cluster):
    """`config` (a TrainConfig or a SweepConfig's base) with GPU workers iff the cluster has GPUs."""
    if isinstance(config, SweepConfig):
        return dataclasses.replace(config, base=with_gpu_from_cluster(config.base, cluster))
    return dataclasses.replace(config, use_gpu=cluster.num_gpus >= 1)


def workers_up_to(capacity: int) -> tuple[int, ...]:
    """1, 2, 4, ... and the capacity itself: the scaling preset's worker counts."""
    counts = [1]
    while counts[-1] * 2 <= capacity:
        counts.append(counts[-1] * 2)
    if counts[-1] != capacity and capacity > 1:
        counts.append(capacity)
    return tuple(counts)
