"""The plan as a person reads it before anything runs: the model and the data,
how the trials are timed, one line a trial and the points left out
(`print_plan`); and the pieces train.py's line and the report's title share."""

from orchestrator.config.dataset import shape_text
from orchestrator.driver import plan
from orchestrator.driver.model_check import memory_line, parameters_text
from orchestrator.records import SHARED_MEMORY_SYNCS, counted


def timing_line(sweep_plan: plan.SweepPlan) -> str:
    """How the plan's trials share the cluster while they are timed."""
    if sweep_plan.placements:
        return (f"each trial timed on whole nodes of its own, up to "
                f"{counted(sweep_plan.max_concurrent_trials, 'trial')} at a time on disjoint nodes")
    if not sweep_plan.side_by_side:
        return "each trial timed with its nodes to itself"
    # The plan, not what happened: report.md's "Trials at once" says how many did overlap.
    return (f"up to {sweep_plan.max_concurrent_trials} trials side by side, sharing nodes: where "
            f"trials overlapped (report.md's 'Trials at once'), their epoch times, speedups and "
            f"efficiencies compare runs that competed for the same cores, memory bandwidth and "
            f"devices")


def workers_text(config) -> str:
    """What the workers run on, and the backend their sums go over."""
    if not config.use_gpu:
        return "CPUs (gloo)"
    if config.two_fit_one_gpu:
        return (f"GPUs, {config.gpus_per_worker:g} of one each: workers may share a GPU "
                f"(gloo, where NCCL refuses two ranks on one device)")
    if config.gpus_per_worker < 1:
        return f"GPUs, {config.gpus_per_worker:g} of one each: no two fit one GPU (NCCL)"
    return "GPUs (NCCL)"


def data_text(config) -> str:
    """The data set and the shapes the model was built for: "fashion-mnist (1x28x28,
    10 classes)"."""
    return (f"{config.dataset} ({shape_text(config.input_shape)}, "
            f"{config.num_classes} classes)")


def print_plan(sweep_plan: plan.SweepPlan) -> None:
    points = sweep_plan.sweep.grid
    base = sweep_plan.sweep.base
    print(f"model {base.model}{parameters_text(base)}, data {data_text(base)}: "
          f"{base.num_train_examples} train / "
          f"{base.num_test_examples} test images")
    memory = memory_line(point.train for point in points)
    if memory:
        print(memory)
    timing = timing_line(sweep_plan)
    if sweep_plan.held_back:
        smallest = min(point.train.num_workers for point in points)
        timing += (f": the cluster holds "
                   f"{counted(sweep_plan.max_concurrent_trials, 'trial')} of "
                   f"{counted(smallest, 'worker')} at once, not the {sweep_plan.held_back} "
                   f"that --max-concurrent-trials asked for")
    elif (sweep_plan.max_concurrent_trials == 1 and len(points) > 1
            and len({point.train.num_workers for point in points}) > 1):
        timing += (": trials of several worker counts compare their times, so they run one "
                   "at a time (--max-concurrent-trials N runs N side by side)")
    elif sweep_plan.pinned:
        timing += (": --pin-cores pins workers by their local rank, the same in every trial, "
                   "so trials run one at a time")
    print(f"timing: {timing}")
    if sweep_plan.shared_gpu:
        print(f"one GPU: the exercises' {max(sweep_plan.sweep.workers)}-worker trials share it, "
              f"{base.gpus_per_worker:g} of it each (gloo): their accuracies answer the "
              f"questions that compare them; no speedup is read from them, and the scaling "
              f"model forecasts GPUs of their own (a what-if); `--workers 1` runs 1 worker "
              f"only")
    graphs = graph_line(sweep_plan.sweep)
    if graphs:
        print(graphs)
    settings = _settings_text(sweep_plan.sweep)
    if settings:
        print(f"every trial: {settings}")
    print(f"{counted(len(points), 'trial')}, up to {sweep_plan.max_concurrent_trials} at a time, "
          f"workers on {workers_text(base)}:")
    several_seeds = len({point.train.seed for point in points}) > 1  # replicas apart
    for point in points:
        train = point.train
        print(f"  {f'[{point.part}] ' if point.part else ''}"
              f"{counted(train.num_workers, 'worker')}, global batch {train.global_batch_size} "
              f"({train.batch_size_per_worker}/worker), lr {train.lr:g}, "
              f"momentum {train.momentum:g}, sync {train.sync}, split {train.split}, "
              f"{train.precision}, {f'seed {train.seed}, ' if several_seeds else ''}"
              f"{counted(train.num_epochs, 'epoch')} of {counted(train.steps_per_epoch, 'step')}"
              + (f", lr warmed up over {counted(train.warmup_epochs, 'epoch')} from "
                 f"{train.warmup_start_lr:g}" if train.warmup_epochs else "")
              + (f", {train.threads_per_worker} threads" if train.threads_per_worker > 1 else "")
              + (f", last worker slowed {train.straggler_slowdown:g}x"
                 if train.straggler_slowdown > 1 else "")
              + _sockets_part(train)
              + _placement_part(sweep_plan.placements, train.num_workers))
    if sweep_plan.left_out:
        print(f"{counted(len(sweep_plan.left_out), 'point')} of the preset left out, the report "
              f"estimates each with the scaling model (a what-if, not a measurement):")
        for cell in sweep_plan.left_out:
            print(f"  {cell.line}")


def graph_line(sweep) -> str | None:
    """Which GPU trials replay their step as a CUDA graph, where a sweep times
    several worker counts against each other (graphed.py); None elsewhere."""
    if not sweep.times_one_gpu_worker_against_others:
        return None
    if sweep.graph_held_off:
        return ("CUDA graphs: none (--cuda-graph auto): several workers' steps run eagerly, "
                "so the 1-worker trials' do too, and each speedup sets a step against one of "
                "its kind; --cuda-graph on captures the 1-worker steps anyway")
    if sweep.base.cuda_graph == "on":
        return ("CUDA graphs: the 1-worker trials' steps (--cuda-graph on); several workers' "
                "run eagerly, so a speedup here sets a replayed step against launched ones")
    return None


def _settings_text(sweep) -> str:
    """The sweep-wide options that change what a trial does or when it ends, which
    the trials' lines do not show: empty where all are the defaults."""
    base = sweep.base
    parts = []
    if base.target_acc is not None:
        parts.append(f"target test accuracy {base.target_acc:g}"
                     + (", the trial ends there (--stop-at-target)" if sweep.stop_at_target
                        else ", recorded when reached"))
    if sweep.scheduler == "asha":
        parts.append("ASHA stops trials that lag (--scheduler asha)")
    if base.evals_per_epoch > 1:
        parts.append(f"evaluated {base.evals_per_epoch} times an epoch")
    if base.sync_batchnorm:
        parts.append("BatchNorm statistics synchronised across workers (--sync-batchnorm)")
    if not base.tf32:
        parts.append("fp32 convolutions in IEEE fp32, not TensorFloat-32 (--no-tf32)")
    if base.accumulation_steps > 1:
        parts.append(accumulation_text(base))
    return "; ".join(parts)


def accumulation_text(train) -> str:
    """"each worker's shard in 4 micro-batches, summed once a step (--accumulation-steps)"."""
    return (f"each worker's shard in {train.accumulation_steps} micro-batches, summed once a "
            f"step (--accumulation-steps)")


def _sockets_part(train) -> str:
    """Where CPU workers that could sum through a node's shared memory sum over
    gloo's sockets (`shared_memory` off: 13.6.3's `bucketed` beside `delayed`, which
    sums over the process group), so that its line is not another trial's."""
    uses_shared_memory = (not train.use_gpu and train.num_workers > 1
                          and train.sync in SHARED_MEMORY_SYNCS)
    return ", summed over gloo's sockets, not shared memory" if (
        uses_shared_memory and not train.shared_memory) else ""


def _placement_part(placements, num_workers: int) -> str:
    """Where a trial's workers go, when they get whole nodes of their own."""
    if not placements:
        return ""
    where = placements[num_workers]
    return (f", on {counted(where.num_nodes, 'whole node')} "
            f"({counted(where.resources_per_worker['CPU'], 'CPU')} reserved per worker)")
