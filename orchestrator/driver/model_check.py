"""The user's model, or a book's on another data set, built and run on the
driver before Ray starts: refused in one line where the workers could not
train it, and its size kept for the plan's lines; once the cluster is known, a
step whose memory floor (training/memory.py) no device or node there can hold
is refused too."""

import math
from collections.abc import Iterable

from orchestrator.config.options import TrainConfig
from orchestrator.errors import UserError
from orchestrator.records import counted


# What `check_model` learnt of the models it built (models.ModelFacts), for the
# plan's lines and the memory check.
_FACTS: dict[tuple, object] = {}


def check_model(config: TrainConfig, syncs: tuple[str, ...] = ()) -> None:
    """The user's model, or a book's on another data set, built and run on a batch
    of two here: one line for one the workers could not train with the run's or
    the sweep's `syncs` (models.check_model). The book's on Fashion-MNIST need no
    check, nor torch's import."""
    if config.is_book_model:
        return
    from orchestrator.training.models import check_model as build_and_run
    _FACTS[_model_key(config)] = build_and_run(
        config.model, num_classes=config.num_classes, input_shape=config.input_shape,
        syncs=syncs or (config.sync,))


def parameters_text(config: TrainConfig) -> str:
    """" (208M parameters, 833M bytes a replica in fp32)" for a model `check_model`
    built; empty for the book's on Fashion-MNIST (LeNet 61.7k, ResNet-18 11.2M)."""
    facts = _FACTS.get(_model_key(config))
    if facts is None:
        return ""
    count = facts.parameters
    return f" ({_si(count)} parameters, {_si(count * 4)} bytes a replica in fp32)"


def memory_line(configs: Iterable[TrainConfig]) -> str:
    """"memory: a worker's step holds at least 1.37GB at 512 images a worker, fp32
    (weights 44.8MB + momentum 44.7MB + activations 1.28GB), the most of the plan's
    points": the floor of the point whose floor is highest; empty for the book's
    models on Fashion-MNIST, which `check_model` does not build."""
    needs = _needs(configs)
    if not needs:
        return ""
    need, config, floor = max(needs, key=lambda item: item[0])
    most = ", the most of the plan's points" if len(needs) > 1 else ""
    return (f"memory: a worker's step holds at least {_bytes(need)} at "
            f"{counted(config.batch_size_per_worker, 'image')} a worker, {config.precision} "
            f"({_parts_text(floor, config)}){most}; gradients, the sums' buffers and the "
            f"allocator's slack come on top")


def require_room_in_memory(configs: Iterable[TrainConfig], cluster,
                           gpu_memory_bytes: float | None = None) -> None:
    """Refuse, in one line, points whose step's memory floor cannot fit where their
    workers would run: on a GPU (`gpu_memory_bytes`, a GPU's memory as the GPU check
    read it; None: GPU points are not checked) or in a node's memory as Ray counts
    it (`memory` and the object store's, the node's free memory when Ray started
    there). Pigeonholes, so that no point that could fit is refused: a trial's k
    workers on G GPUs put ceil(k / G) on one at least (one, when each owns its GPU),
    and on n nodes that hold its workers, ceil(k / n) on one node."""
    too_big = []
    for need, config, floor in _needs(configs):
        if config.use_gpu:
            if gpu_memory_bytes is None:
                continue
            together = math.ceil(config.num_workers / max(1, math.floor(cluster.num_gpus)))
            room, where = gpu_memory_bytes, f"a GPU of {_bytes(gpu_memory_bytes)}"
        else:
            holding = [node for node, capacity in zip(
                cluster.node_resources, cluster.node_capacities(config.resources_per_worker))
                if capacity > 0] or cluster.node_resources
            rooms = [node["memory"] + node.get("object_store_memory", 0.0)
                     for node in holding if "memory" in node]
            if not rooms:  # a node that counts no memory: not checked
                continue
            together = math.ceil(config.num_workers / len(holding))
            room = max(rooms)
            where = f"a node of {_bytes(room)} (the memory Ray counts there)"
        if need * together > room:
            too_big.append((need, config, floor, together, where))
    if not too_big:
        return
    need, config, floor, together, where = min(too_big, key=lambda item: item[0])
    from orchestrator.driver.failures import less_memory_ways
    more = (f" (the least of this plan's {len(too_big)} points that cannot fit)"
            if len(too_big) > 1 else "")
    held = (f"and at least {together} of the trial's workers share {where}: more than it "
            f"holds" if together > 1 else f"more than {where} holds")
    raise UserError(
        f"{counted(config.num_workers, 'worker')} at global batch {config.global_batch_size}, "
        f"{config.precision}{more}: a worker's step holds at least {_bytes(need)} at "
        f"{counted(config.batch_size_per_worker, 'image')} a worker "
        f"({_parts_text(floor, config)}), {held}; "
        f"{less_memory_ways('GPU' if config.use_gpu else 'node', config.precision)}")


def _needs(configs: Iterable[TrainConfig]) -> list[tuple[int, TrainConfig, object]]:
    """Each config's step floor, with the config and the model's floor: for the models
    `check_model` built."""
    needs = []
    for config in configs:
        facts = _FACTS.get(_model_key(config))
        if facts is not None:
            floor = facts.memory_floor
            needs.append((floor.worker_bytes(config.batch_size_per_worker, config.precision,
                                             config.momentum), config, floor))
    return needs


def _parts_text(floor, config: TrainConfig) -> str:
    """"weights 44.8MB + momentum 44.7MB + activations 1.28GB": a floor's parts."""
    weights = floor.state_bytes + (floor.momentum_bytes if config.momentum else 0)
    activations = floor.worker_bytes(config.batch_size_per_worker, config.precision,
                                     config.momentum) - weights
    return " + ".join([f"weights {_bytes(floor.state_bytes)}"]
                      + ([f"momentum {_bytes(floor.momentum_bytes)}"] if config.momentum else [])
                      + [f"activations {_bytes(activations)}"])


def _bytes(count: float) -> str:
    """"1.37GB", "35.5kB": powers of 1000 (torch's and nvidia-smi's MiB are 1.05MB)."""
    return f"{_si(count)}B"


def _si(value: float) -> str:
    """3 significant digits and an SI prefix: 13.1k, 833M, 1M (999,600), 100."""
    value = float(f"{value:.3g}")
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g}{prefix}"
    return f"{value:.3g}"


def _model_key(config: TrainConfig) -> tuple:
    return (config.model, config.num_classes, tuple(config.input_shape))
