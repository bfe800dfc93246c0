"""`--memory-format auto`'s probe in a run: one training step of a throwaway copy of
the run's model in each layout, on the run's own batch (replayed as a CUDA graph
where the run's step is one), for layout.py to time and choose from. Nothing here
may import ray.
"""

import dataclasses
import functools

import torch
from torch.nn import functional as F

from orchestrator.config.options import TrainConfig
from orchestrator.training import graphed as step_graph
from orchestrator.training import layout
from orchestrator.training.recipe import make_optimizer, model_of
from orchestrator.training.step import PARAMETER_DTYPES, forward, memory_format
from orchestrator.training.timing import DeviceTimer


def time_layouts_of_run(config: TrainConfig, device: torch.device, images: torch.Tensor,
                        labels: torch.Tensor, *, graphed: bool) -> dict[str, float]:
    """`auto`'s seconds a step in each layout; `graphed`: of the steps replayed as CUDA
    graphs, after each one's eager warm-up steps, its capture and a replay. Where a
    layout's capture failed its steps ran eagerly, and an eager step beside a replayed
    one says nothing of the layouts: both are timed again eagerly."""
    if graphed:
        step, replays = _layout_step(config, device, images, labels, graphed=True)
        step_s = layout.time_layouts(step, device, warmup_rounds=step_graph.WARMUP_STEPS + 2)
        if all(replay.state == step_graph.ON for replay in replays.values()):
            return step_s
    step, _ = _layout_step(config, device, images, labels, graphed=False)
    return layout.time_layouts(step, device)


def _layout_step(config: TrainConfig, device: torch.device, images: torch.Tensor,
                 labels: torch.Tensor, *, graphed: bool
                 ) -> tuple[layout.Step, dict[str, step_graph.GraphedStep]]:
    """One forward, backward and SGD step of a throwaway copy of the run's model,
    on a shard of the run's batch size per worker (a micro-batch of it, with gradient
    accumulation: what one forward and backward holds), in the layout asked for; with
    the layouts' GraphedSteps where `graphed` (a run whose step is a CUDA graph):
    replayed as one too, after its eager warm-up steps and its capture.

    Without SyncBatchNorm: its statistics' sync is no part of the layout's cost.
    """
    runs = {}
    for name in layout.FORMATS:
        run_config = dataclasses.replace(config, memory_format=name)
        model = model_of(config).to(
            device, dtype=PARAMETER_DTYPES[config.precision],
            memory_format=memory_format(run_config))
        runs[name] = (run_config, model, make_optimizer(model.parameters(), config))

    def one_step(name: str, index: torch.Tensor | slice) -> tuple[torch.Tensor]:
        run_config, model, optimizer = runs[name]
        logits = forward(model, images[index], run_config)
        loss = F.cross_entropy(logits, labels[index].long())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return (loss.detach(),)
    if not graphed:
        first = slice(0, config.micro_batch_size_per_worker)
        return (lambda name: one_step(name, first)), {}
    first = torch.arange(config.batch_size_per_worker, device=device)
    timer = DeviceTimer(device)  # the replays' own, unread: time_layouts times them
    replays = {name: step_graph.GraphedStep(functools.partial(one_step, name),
                                            runs[name][2].zero_grad, len(first), device)
               for name in layout.FORMATS}
    return (lambda name: replays[name](first, timer)), replays
