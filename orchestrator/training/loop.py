"""The training loop itself, the book's `train` (its `train_batch` is step.py), without Ray.

It runs on each Ray Train worker (worker.py) and equally in a single process
(world size 1): the tests, the benchmarks and a machine without Ray (the GPU
benchmark) call `run_training` directly. Nothing here may import ray.
"""

import copy
import dataclasses
import math
import platform
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

from orchestrator.training.sync.collectives import (allreduce_, broadcast_, gather_strings, get_rank,
                                                    get_world_size, process_group_backend)
from orchestrator.config.options import TrainConfig
from orchestrator.records import Status
from orchestrator.training import graphed as step_graph
from orchestrator.training import layout, profiling
from orchestrator.training.data import Images
from orchestrator.training.layout_probe import time_layouts_of_run
from orchestrator.training.loss_scale import LossScale
from orchestrator.training.recipe import make_optimizer, model_of, set_cudnn
from orchestrator.training.split import BatchSplit
from orchestrator.training.step import (PARAMETER_DTYPES, apply_sum, evaluate,
                                        memory_format, step_on, train_batch)
from orchestrator.training.step_metrics import GradientNoise, NonFiniteCheck, StepSync
from orchestrator.training.sync.base import GradientSync
from orchestrator.training.sync.strategies import make_sync

# An epoch's training loss 100 times a uniform guess's (ln of the classes, ln 10
# for Fashion-MNIST) means blown up: a too-large lr can throw the loss to 1e20
# and then, its ReLUs dead, leave it at a finite constant that no non-finite
# check catches.
DIVERGED_LOSS_FACTOR = 100

# Called at every evaluation on every worker with (metrics, training state,
# epoch history, evaluations); `metrics["end_of_epoch"]` tells an epoch's row
# from a mid-epoch evaluation's. The state is None once the run diverged.
Reporter = Callable[[dict, dict | None, list[dict], list[dict]], None]
# Called by `train_one_epoch` after each mid-epoch evaluation step with (steps
# done this epoch, training seconds this epoch so far).
OnEvaluation = Callable[[int, float], None]


def run_training(config: TrainConfig, data: Images, *, device: torch.device,
                 report: Reporter,
                 resume_from: tuple[dict, list[dict], list[dict]] | None = None,
                 started_at: float | None = None, node_id: str | None = None,
                 layout_scope: str | None = None, stop_at: float | None = None,
                 graph_held_off: str | None = None,
                 keep_trace: profiling.KeepTrace | None = None) -> list[dict]:
    """Train for `config.num_epochs`, evaluating `config.evals_per_epoch` times an
    epoch and reporting each; returns the epoch history. `stop_at`: a test accuracy
    at which training ends, at the first evaluation that reaches it, mid-epoch too
    (`--stop-at-target`): the history then holds the epochs that ended before it.

    `started_at` (`time.time()`, default now) is when the run started, for the
    evaluations' wall seconds; `resume_from` is a checkpoint's (state, history,
    evaluations); `node_id` names this worker's node (its Ray node id; default
    this machine's name); `layout_scope` names the sweep whose timings of the
    memory layouts a node keeps (default: this process's; layout.py);
    `graph_held_off`: why the run's sweep captures no step under `--cuda-graph auto`
    (SweepConfig.graph_held_off); `keep_trace`: where `--profile-steps`' traces go.
    """
    # When this worker group started on its nodes (a restart's is later): with each
    # epoch's end, it draws the trial on report/timeline.py's time line.
    run_started_unix_s = time.time()
    started_at = run_started_unix_s if started_at is None else started_at
    num_workers = get_world_size()
    assert num_workers == config.num_workers, (num_workers, config.num_workers)
    history: list[dict] = []
    evaluations: list[dict] = []
    state = None

    def reached(evaluation: dict) -> bool:
        return stop_at is not None and evaluation["test_acc"] >= stop_at

    if resume_from is not None:
        state, history, evaluations = resume_from
        if state is None:
            return history  # a diverged run's last checkpoint: nothing to resume
        if evaluations and reached(evaluations[-1]):
            return history  # it ended at the target: nothing more to train
    # The images the run uses (Fashion-MNIST's uint8: 52 MB) go to the device once and
    # each batch is gathered there, not copied from the host every step; on a CPU `.to`
    # is a no-op. A sweep loads its data once for every trial: a trial with a test limit
    # of its own (the exercises' ResNet-18 on CPUs: 500 images) copies and scores only
    # those (model_check.require_room_in_memory counts this copy on a GPU).
    train, test = config.num_train_examples, config.num_test_examples
    train_images, train_labels, test_images, test_labels = (
        tensor.to(device) for tensor in _as_tensors(
            data.train_images[:train], data.train_labels[:train],
            data.test_images[:test], data.test_labels[:test]))
    if device.type == "cuda":
        set_cudnn(config)
    # One GPU: the step replayed as a CUDA graph (graphed.py), and so are the layouts' steps
    # `auto` times: launched kernel by kernel, a step is bound by the launches whatever
    # its layout (bench/notes/gpu_step.md).
    graph_off = step_graph.off_reason(config, device, graph_held_off)
    # A resumed run keeps the layout it chose; from here on `config` names it.
    chosen_layout = state["layout"] if state is not None else layout.choose(
        config, device, lambda: time_layouts_of_run(config, device, train_images, train_labels,
                                                    graphed=graph_off is None),
        scope=layout_scope or layout.process_scope(), graphed=graph_off is None)
    config = dataclasses.replace(config, memory_format=chosen_layout["memory_format"])
    if device.type == "cuda":  # the peak is the run's: the layouts' timing is gone by now
        torch.cuda.reset_peak_memory_stats(device)
    model = model_of(config)
    if config.sync_batchnorm:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device, dtype=PARAMETER_DTYPES[config.precision], memory_format=memory_format(config))
    optimizer = make_optimizer(model.parameters(), config)
    shares = None
    # fp16's loss scale goes on from the checkpoint's, as the weights do.
    scale = (LossScale(state and state.get("loss_scale")) if config.precision == "fp16"
             else None)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        shares = state["split_shares"]
        # The state is the last finished epoch's: later evaluations run again.
        evaluations = [row for row in evaluations if row["epoch"] <= len(history)]
        if evaluations:  # a resumed sweep's trial: its wall clock goes on from there
            started_at = min(started_at, time.time() - evaluations[-1]["wall_s"])
    # Identical replicas come from rank 0's weights, not from trusting seeds.
    broadcast_([*model.parameters(), *model.buffers()])
    sync = make_sync(config.sync, model, device, bucket_cap_mb=config.bucket_cap_mb,
                     shared_memory=config.shared_memory, optimizer=optimizer)
    split = BatchSplit(config, device, shares)
    # A graphed step has a check of its own for the whole run: the graph holds on to its count.
    check = graphed = None
    if graph_off is None:
        check = NonFiniteCheck(sync, device)
        graphed = step_graph.GraphedStep(
            lambda index: step_on(sync, optimizer, train_images, train_labels, index, config,
                                   check),
            sync.zero_grad, config.global_batch_size, device)
    devices = "[" + ", ".join(gather_strings(str(device))) + "]"
    # Where each rank ran, so a multi-node trial shows which nodes it spanned:
    # the text of the list, as epochs.csv holds it (a list of strings is no
    # metric to Tune's TensorBoard logger, which warned on every sweep).
    worker_nodes = str(gather_strings(node_id or platform.node()))
    run_fields = {
        "model": config.model, "dataset": config.dataset, "sync": config.sync,
        "split": config.split,
        "transport": sync.transport, "backend": process_group_backend(),
        "lr": config.lr, "momentum": config.momentum,
        "precision": config.precision, **chosen_layout,
        "num_workers": num_workers, "global_batch_size": config.global_batch_size,
        "batch_size_per_worker": config.batch_size_per_worker,
        "accumulation_steps": config.accumulation_steps,
        "steps_per_epoch": config.steps_per_epoch,
        "num_test_examples": config.num_test_examples, "seed": config.seed,
        "device": str(device), "devices": devices, "worker_nodes": worker_nodes,
        "run_started_unix_s": run_started_unix_s,
    }

    def state_now() -> dict:
        return {"model": model.state_dict(), "optimizer": sync.optimizer_state_dict(optimizer),
                "split_shares": list(split.shares), "layout": chosen_layout,
                **({"loss_scale": scale.state_dict()} if scale is not None else {})}

    # A mid-epoch checkpoint holds the last finished epoch's state (a copy:
    # state dicts share the live tensors), so a restart redoes that epoch whole.
    epoch_start_state = copy.deepcopy(state_now()) if config.evals_per_epoch > 1 else None
    train_s = sum(row["epoch_time_s"] for row in history)  # training seconds so far

    def evaluate_now(epoch: int, steps_done: int, epoch_train_s: float) -> dict:
        """Test accuracy after `steps_done` steps of `epoch`, recorded in `evaluations`."""
        broadcast_(model.buffers())  # evaluate every shard with rank 0's BatchNorm statistics
        start = time.perf_counter()
        test_acc = evaluate(model, test_images, test_labels, config, device=device)
        evaluations.append({"epoch": epoch + steps_done / config.steps_per_epoch,
                            "test_acc": test_acc, "train_s": train_s + epoch_train_s,
                            "wall_s": time.time() - started_at,
                            "eval_s": time.perf_counter() - start})
        return evaluations[-1]

    def evaluate_mid_epoch(epoch: int, steps_done: int, epoch_train_s: float) -> None:
        evaluation = evaluate_now(epoch, steps_done, epoch_train_s)
        metrics = {**evaluation, "end_of_epoch": False, "status": Status.OK, **run_fields}
        if not reached(evaluation):
            report(metrics, epoch_start_state, history, evaluations)
            return
        # The run ends here: its checkpoint keeps the weights that reached the target
        # (a resume trains no more), every rank alike (the accuracy is summed over all).
        report(metrics, state_now(), history, evaluations)
        raise _ReachedTarget

    for epoch in range(len(history), config.num_epochs):
        num_evaluations = len(evaluations)
        started_unix_s = time.time()
        profiler = _profiler(config, device, epoch, graphed)
        try:
            stats = train_one_epoch(sync, optimizer, split, train_images, train_labels, config,
                                    epoch=epoch, device=device,
                                    on_evaluation=lambda steps, seconds: evaluate_mid_epoch(
                                        epoch, steps, seconds), graphed=graphed, check=check,
                                    scale=scale, profiler=profiler)
        except _ReachedTarget:
            break
        finally:
            if profiler is not None:  # where a step raised too: the profiler off
                profiler.stop()
        if profiler is not None:
            stats["profile"] = profiling.gathered(profiler, keep_trace)
        evaluation = evaluate_now(epoch, config.steps_per_epoch, stats["epoch_time_s"])
        train_s = evaluation["train_s"]
        eval_time_s = sum(row["eval_s"] for row in evaluations[num_evaluations:])
        metrics = {"epoch": epoch + 1, **stats, "test_acc": evaluation["test_acc"],
                   "train_s": train_s, "wall_s": evaluation["wall_s"],
                   "eval_time_s": eval_time_s, "end_of_epoch": True, **run_fields,
                   "step_graph": graphed.state if graphed is not None else graph_off,
                   "started_unix_s": started_unix_s, "ended_unix_s": time.time(),
                   "peak_memory_mb": (torch.cuda.max_memory_allocated(device) / 2**20
                                      if device.type == "cuda" else None)}
        history.append(metrics)
        # A diverged run's weights may not be finite: its checkpoint keeps the history only.
        state = None if metrics["status"] == Status.DIVERGED else state_now()
        if epoch_start_state is not None and state is not None:
            epoch_start_state = copy.deepcopy(state)
        report(metrics, state, history, evaluations)
        if metrics["status"] == Status.DIVERGED or reached(evaluation):
            break
    return history


def _profiler(config: TrainConfig, device: torch.device, epoch: int,
              graphed: "step_graph.GraphedStep | None") -> profiling.StepProfiler | None:
    """`--profile-steps`' profiler of this epoch: the first epoch's only. A step
    replayed as a CUDA graph from the epoch's start (no lr warm-up) is profiled after
    its eager warm-up steps and its capture."""
    if not config.profile_steps or epoch != 0:
        return None
    skip = profiling.FIRST_STEPS
    if graphed is not None and config.warmup_epochs == 0:
        skip = step_graph.WARMUP_STEPS + 1
    return profiling.StepProfiler(device, profiling.window(
        config.steps_per_epoch, mid_epoch_evaluation_steps(config), skip,
        config.profile_steps))


class _ReachedTarget(Exception):
    """A mid-epoch evaluation reached `stop_at`: the epoch ends there, unrecorded."""


def train_one_epoch(sync: GradientSync, optimizer: torch.optim.Optimizer, split: BatchSplit,
                    images: torch.Tensor, labels: torch.Tensor, config: TrainConfig, *,
                    epoch: int, device: torch.device,
                    on_evaluation: OnEvaluation | None = None,
                    graphed: "step_graph.GraphedStep | None" = None,
                    check: NonFiniteCheck | None = None,
                    scale: LossScale | None = None,
                    profiler: profiling.StepProfiler | None = None) -> dict:
    """One pass over the training set; returns the epoch's training statistics.

    `on_evaluation` is called at each of the epoch's `config.evals_per_epoch - 1`
    mid-epoch evaluation points; its time is not counted as training. `graphed`
    runs each step once the lr's warm-up is over (the lr is then fixed, as a
    captured step needs it), `check` being the one its capture counts into.
    `scale`: fp16's loss scale (loss_scale.py), going on from epoch to epoch.
    `profiler`: `--profile-steps`' (profiling.py), told of each step.
    """
    batch_size = config.global_batch_size
    # Every worker draws the same permutation, then takes its own slice of
    # each global batch (`split`): together they see exactly one device's minibatch.
    order = torch.randperm(config.num_train_examples,
                           generator=torch.Generator().manual_seed(config.seed * 10_007 + epoch)
                           ).to(device)
    warmup_steps = config.warmup_epochs * config.steps_per_epoch
    evaluate_after = mid_epoch_evaluation_steps(config) if on_evaluation else set()
    sync.module.train()
    sync.sync_time_s = 0.0
    check = check or NonFiniteCheck(sync, device)
    noise = GradientNoise(device) if GradientNoise.applies(config) else None
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    num_correct = torch.zeros((), dtype=torch.float64, device=device)
    status = Status.OK
    num_steps = 0
    epoch_time_s = 0.0
    step_sync = StepSync(sync, config, device)
    skipped_before = scale.skipped_steps if scale is not None else 0
    start = time.perf_counter()
    for step in range(config.steps_per_epoch):
        global_step = epoch * config.steps_per_epoch + step
        if global_step < warmup_steps:
            _set_lr(optimizer, warmup_lr(config, global_step, warmup_steps))
        elif global_step == warmup_steps:
            _set_lr(optimizer, config.lr)
        shard_start, shard_stop = split.next_slice()
        if profiler is not None:
            profiler.before_step(step)
        index = order[step * batch_size + shard_start: step * batch_size + shard_stop]
        if graphed is not None and global_step >= warmup_steps:
            # Timed whole: forward, backward and the update (the capture not).
            losses, logits, y = graphed(index, split.timer)
            outcome = None if check.after_step() else (losses, logits)
        else:
            y = labels[index].long()
            outcome = train_batch(sync, optimizer, images[index], y, config, check,
                                  split.timer, noise, scale)
        step_sync.after_step(step)
        if profiler is not None:
            profiler.after_step(step)
        if outcome is None:
            status = Status.DIVERGED
            break
        losses, logits = outcome
        loss_sum += losses.sum()
        num_correct += (logits.argmax(dim=1) == y).sum()
        num_steps += 1
        split.after_step()
        if num_steps in evaluate_after:
            epoch_time_s += _seconds_since(start, device) - _profiler_overhead_s(profiler)
            on_evaluation(num_steps, epoch_time_s)
            sync.module.train()
            start = time.perf_counter()
    # delayed: the epoch's last gradient, still in flight, applied now (if it ran well)
    if sync.drain() and status == Status.OK and not apply_sum(sync, optimizer, check, scale):
        status = Status.DIVERGED
    epoch_time_s += _seconds_since(start, device) - _profiler_overhead_s(profiler)
    if check.read():  # steps after the last read
        status = Status.DIVERGED
    # The noise probe's shard sums ride on the epoch's one collective (zeros without it),
    # and so does each rank's sync time, in its own slot of a zero row: the sum is exact.
    shard_sums = noise.shard_sums if noise is not None else torch.zeros(
        2, dtype=torch.float64, device=device)
    sync_s = torch.zeros(get_world_size(), dtype=torch.float64, device=device)
    sync_s[get_rank()] = sync.sync_time_s
    totals = allreduce_(torch.cat([torch.stack([loss_sum, num_correct]), shard_sums, sync_s,
                                   step_sync.rows().flatten()]))
    num_examples = max(num_steps, 1) * batch_size
    train_loss = totals[0].item() / num_examples if status == Status.OK else math.nan
    # the same all-reduced value, so the same verdict everywhere
    if train_loss > DIVERGED_LOSS_FACTOR * math.log(config.num_classes):
        status = Status.DIVERGED
    return {
        "train_loss": train_loss,
        "train_acc": totals[1].item() / num_examples,
        "epoch_time_s": epoch_time_s,
        "samples_per_s": num_steps * batch_size / epoch_time_s,
        "sync_time_s": sync.sync_time_s,
        "sync_in_flight_s": sync.in_flight_s,
        # Every rank's total (each holds its waits for the others), and the sums' own time.
        "worker_sync_s": totals[4:4 + get_world_size()].tolist(),
        "sync_least_s": step_sync.least_s(totals[4 + get_world_size():]),
        **(noise.epoch_metrics(totals[2:4], config.num_workers) if noise is not None
           else GradientNoise.NOT_MEASURED),
        "status": status,
        # fp16's loss scale at the epoch's end, and the steps it skipped in the epoch.
        "loss_scale": scale.scale if scale is not None else math.nan,
        "skipped_steps": scale.skipped_steps - skipped_before if scale is not None else 0,
        **split.end_epoch(num_steps),
    }


def _profiler_overhead_s(profiler: profiling.StepProfiler | None) -> float:
    """The profiler's start and stop since it was last asked: no training."""
    return profiler.take_overhead_s() if profiler is not None else 0.0


def mid_epoch_evaluation_steps(config: TrainConfig) -> set[int]:
    """After which steps of an epoch to evaluate, besides its end: evenly spaced."""
    steps, count = config.steps_per_epoch, config.evals_per_epoch
    return {index * steps // count for index in range(1, count)}


def _as_tensors(*arrays) -> list[torch.Tensor]:
    # Arrays from Ray's object store are read-only views of shared memory;
    # torch warns about that, but the loop only ever reads them.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return [torch.from_numpy(array) for array in arrays]


def _seconds_since(start: float, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a CUDA step is not done when Python returns
    return time.perf_counter() - start


def warmup_lr(config: TrainConfig, step: int, warmup_steps: int) -> float:
    """The lr of warm-up step `step` (from 0): linear from `warmup_start_lr` to `lr`,
    which its last step reaches (Goyal et al., 2017, start at the small batch's lr)."""
    start = config.warmup_start_lr
    return start + (config.lr - start) * (step + 1) / warmup_steps


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
