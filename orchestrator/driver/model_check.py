"""The user's model, or a book's on another data set, built and run on the
driver before Ray starts: refused in one line where the workers could not
train it, and its size and memory floor (training/memory.py) kept for the
plan's lines; once the cluster is known, a point whose floor cannot fit on the
device that must hold the most of a trial is refused too, the book's models on
Fashion-MNIST among them (their floors counted then, once torch's import costs
nothing a bad input would wait for)."""

import math
from collections.abc import Iterable

from orchestrator.config.options import TrainConfig
from orchestrator.errors import UserError
from orchestrator.records import bytes_text, counted, si_text


# What `check_model` learnt of the models it built (models.ModelFacts), for the
# plan's lines and the memory check.
_FACTS: dict[tuple, object] = {}
# The book's models' floors on Fashion-MNIST, for the memory check alone: counted
# when it first asks (`_book_floor`).
_BOOK_FLOORS: dict[tuple, object] = {}


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
    return f" ({si_text(count)} parameters, {si_text(count * 4)} bytes a replica in fp32)"


def memory_line(configs: Iterable[TrainConfig]) -> str:
    """"memory: a worker's step holds at least 1.37GB at 512 images a worker, fp32
    (weights 44.8MB + momentum 44.7MB + activations 1.28GB), the most of the plan's
    points": the floor of the point whose floor is highest, for its busiest worker;
    empty for the book's models on Fashion-MNIST, which `check_model` does not build."""
    needs = [(config, _parts(floor, config, config.batch_size_per_worker))
             for config, floor in _floors(configs)]
    if not needs:
        return ""
    config, parts = max(needs, key=lambda item: sum(item[1].values()))
    most = ", the most of the plan's points" if len(needs) > 1 else ""
    return (f"memory: a worker's step holds at least {bytes_text(sum(parts.values()))} at "
            f"{counted(config.batch_size_per_worker, 'image')} a worker"
            f"{_in_micro_batches(config)}, {config.precision} "
            f"({_parts_text(parts)}){most}; gradients, the sums' buffers and the "
            f"allocator's slack come on top")


def first_worker_floor_mb(config: TrainConfig) -> float:
    """The floor of the first worker's step at its share of the first epoch (every
    run's is the even split's), in MiB as torch's peaks are: the least its
    `peak_memory_mb` can be on a GPU; NaN where the model's floor was not counted."""
    floors = _floors([config], book_models=True)
    if not floors:
        return math.nan
    return sum(_parts(floors[0][1], config, config.batch_sizes_per_worker[0]).values()) / 2**20


def require_room_in_memory(configs: Iterable[TrainConfig], cluster,
                           gpu_memory_bytes: float | None = None, *, data=None, run: str = "",
                           ways: str = "") -> None:
    """Refuse, in one line, points whose step's memory floor cannot fit on the device
    that must hold the most of a trial: a GPU (`gpu_memory_bytes`, the most a GPU
    has as the GPU check read them; None: GPU points are not checked) or, for CPU
    workers, a node, in its memory as Ray counts it (`memory` and the object
    store's: the node's free memory when Ray started there, or what `ray start
    --memory` declared: less than the node has, where memory was in use then or the
    declaration is low; the refusal names the figure). Floors throughout, so that
    no point that could fit in that room is refused (`_most_on_one_device`), but for
    workers on fractions of a GPU: those crowd one GPU as Ray places them
    (`_workers_on_one_gpu`), not spread over the GPUs there are. A GPU worker also
    holds its own copy of the run's images of `data` (data.Images) there, as the
    loop moves them once (a CPU worker reads Ray's one shared copy, in the object
    store's memory). `run` names the run the refusal is of, and `ways` replaces
    what needs less memory."""
    too_big = []
    for config, floor in _floors(configs, book_models=True):
        together, data_bytes = None, 0
        if config.use_gpu:
            if gpu_memory_bytes is None:
                continue
            together = _workers_on_one_gpu(config)
            devices = min(max(1, math.floor(cluster.num_gpus)),
                          math.ceil(config.num_workers / together))
            kind, room = "GPU", gpu_memory_bytes
            where = f"a GPU of {bytes_text(gpu_memory_bytes)}"
            data_bytes = _data_bytes(data, config)
        else:
            holding = [node for node, capacity in zip(
                cluster.node_resources, cluster.node_capacities(config.resources_per_worker))
                if capacity > 0] or list(cluster.node_resources)
            if not all("memory" in node for node in holding):  # a node that counts none
                continue
            devices, kind = len(holding), "node"
            room = max(node["memory"] + node.get("object_store_memory", 0.0) for node in holding)
            where = f"a node of {bytes_text(room)} (the memory Ray counts there)"
        devices = min(devices, config.num_workers)
        parts, whose = _most_on_one_device(floor, config, devices, kind, together, data_bytes)
        if sum(parts.values()) > room:
            # Whether the steps alone fit, beside no copy of the data set.
            steps_fit = sum(_most_on_one_device(floor, config, devices, kind,
                                                together)[0].values()) <= room
            too_big.append((sum(parts.values()), config, parts, whose, where, steps_fit,
                            data_bytes > 0))
    if not too_big:
        return
    need, config, parts, whose, where, steps_fit, data_copied = min(too_big,
                                                                    key=lambda item: item[0])
    more = (f" (the least of this plan's {len(too_big)} points that cannot fit)"
            if len(too_big) > 1 else "")
    raise UserError(
        f"{run}{counted(config.num_workers, 'worker')} at global batch "
        f"{config.global_batch_size}, {config.precision}{more}: {whose} at least "
        f"{bytes_text(need)} ({_parts_text(parts)}), more than {where} holds; "
        + (ways or _less_memory_ways(config, cluster, data_copied=data_copied,
                                     steps_fit=steps_fit)))


def _less_memory_ways(config: TrainConfig, cluster, *, data_copied: bool,
                      steps_fit: bool) -> str:
    """What needs less memory; where GPU workers copy the data set (`data_copied`),
    smaller limits too: alone where the steps would fit beside no copy
    (`steps_fit`), and then, where the workers crowd fewer GPUs than the cluster
    has, a larger --gpus-per-worker."""
    from orchestrator.driver.failures import less_memory_ways
    ways = less_memory_ways("GPU" if config.use_gpu else "node", config.precision,
                            shared_gpus=config.shares_gpu,
                            accumulate=config.micro_batch_size_per_worker > 1)
    if not data_copied:
        return ways
    fewer_data = (f"each GPU worker copies the {config.num_train_examples} train and "
                  f"{config.num_test_examples} test images it uses to its GPU: a smaller "
                  f"--train-limit or --test-limit copies less")
    if not steps_fit:
        return f"{ways}; {fewer_data}"
    gpus_used = math.ceil(config.num_workers / _workers_on_one_gpu(config))
    spread = config.shares_gpu and math.floor(cluster.num_gpus) > gpus_used
    return fewer_data + ("; fewer workers to a GPU (a larger --gpus-per-worker) make fewer "
                         "copies on each" if spread else "")


def _data_bytes(data, config: TrainConfig) -> int:
    """The bytes of `data`'s images and labels that one of `config`'s GPU workers
    copies to its GPU (loop.py: the first train and test images the run uses); 0
    where the data set is not at hand."""
    if data is None:
        return 0
    return sum(min(count, len(images)) * (images[0].nbytes + labels.itemsize)
               for count, images, labels in (
                   (config.num_train_examples, data.train_images, data.train_labels),
                   (config.num_test_examples, data.test_images, data.test_labels)))


def _workers_on_one_gpu(config: TrainConfig) -> int:
    """How many of a trial's GPU workers Ray puts on one GPU: one each at
    --gpus-per-worker 1; below, Ray gives each fraction from the GPU with the least
    left that holds it (best fit: Ray's resource_instance_set.cc), so that the
    first GPU takes as many as fit it (measured with Ray 2.60: four workers at
    0.5 on four GPUs share two)."""
    return min(config.num_workers, config.workers_per_gpu)


def _most_on_one_device(floor, config: TrainConfig, devices: int, kind: str,
                        together: int | None = None,
                        data_bytes: int = 0) -> tuple[dict[str, int], str]:
    """The floor, by part, of the device (a `kind`, "GPU" or "node") that must hold
    the most of a trial of `config` whose workers use `devices` of them, and
    whose steps those are, for the refusal's line: of its k workers, one device
    holds `together` (spread: ceil(k / devices)), which under the even split hold
    the smallest shares at least, and under the proportional one an image each (a
    share may shrink to one); and one device holds the busiest worker (even split),
    or ceil(B / devices) of the global batch B (proportional), among the workers on it.
    Beside the steps, `data_bytes` of the data set for each GPU worker on that GPU:
    `together` where they crowd it, else as few as the other GPUs leave there (each
    holds at most `together`), one at least."""
    together = together or math.ceil(config.num_workers / devices)
    if config.split == "even":
        shares = sorted(config.batch_sizes_per_worker)
        crowded, busiest = shares[:together], [shares[-1]]
        busiest_whose = f"a worker's step at {counted(busiest[0], 'image')} holds"
    else:
        busiest = [math.ceil(config.global_batch_size / devices)]
        crowded = [1] * together
        busiest_whose = (f"a worker's step at {counted(busiest[0], 'image')} holds"
                         if together == 1 else
                         f"the workers on one {kind}, at {counted(busiest[0], 'image')} "
                         f"among them, hold")
    least_there = max(1, config.num_workers - (devices - 1) * together)
    busiest_parts, crowded_parts = (_group_parts(floor, config, shares, data_bytes, copies)
                                    for shares, copies in ((busiest, least_there),
                                                           (crowded, together)))
    if sum(busiest_parts.values()) >= sum(crowded_parts.values()):
        return busiest_parts, busiest_whose
    return crowded_parts, (f"the {together} workers that must share a {kind}, at "
                           f"{counted(sum(crowded), 'image')} among them, hold")


def _floors(configs: Iterable[TrainConfig],
            book_models: bool = False) -> list[tuple[TrainConfig, object]]:
    """Each config with its model's memory floor (memory.MemoryFloor): for the models
    `check_model` built and could count, and with `book_models` the book's on
    Fashion-MNIST (the plan's line leaves them out: a student's LeNet needs none)."""
    floors = []
    for config in configs:
        if config.is_book_model:
            if book_models:
                floors.append((config, _book_floor(config)))
            continue
        facts = _FACTS.get(_model_key(config))
        if facts is not None and facts.memory_floor is not None:
            floors.append((config, facts.memory_floor))
    return floors


def _book_floor(config: TrainConfig):
    """The memory floor of the book's `config.model` on Fashion-MNIST, counted once."""
    key = _model_key(config)
    if key not in _BOOK_FLOORS:
        from orchestrator.training.memory import measure_floor
        from orchestrator.training.models import build_model
        model = build_model(config.model, seed=0, num_classes=config.num_classes,
                            input_shape=config.input_shape)
        _BOOK_FLOORS[key] = measure_floor(model, tuple(config.input_shape), config.num_classes)
    return _BOOK_FLOORS[key]


def _parts(floor, config: TrainConfig, images: int) -> dict[str, int]:
    """The floor of one of `config`'s workers' step at `images`, by part. `--sync
    sharded` keeps 1/k of the momentum on each worker (sync/sharded.py); a run of one
    step frees its activations before the first update makes the momentum; with
    gradient accumulation a backward holds one micro-batch's activations at a time."""
    momentum = config.momentum if config.steps_per_epoch * config.num_epochs > 1 else 0.0
    micro_batch = -(-images // config.accumulation_steps)
    return floor.parts(micro_batch, config.precision, momentum,
                       optimizer_shards=config.num_workers if config.sync == "sharded" else 1)


def _in_micro_batches(config: TrainConfig) -> str:
    steps = config.accumulation_steps
    return (f" in {steps} micro-batches of {config.micro_batch_size_per_worker} or fewer"
            if steps > 1 else "")


def _group_parts(floor, config: TrainConfig, shares: list[int], data_bytes: int = 0,
                 copies: int = 1) -> dict[str, int]:
    """The floors of workers at `shares` images each, by part, summed; and
    `copies` of the data set's `data_bytes` beside them."""
    total: dict[str, int] = {}
    for share in shares:
        for name, count in _parts(floor, config, share).items():
            total[name] = total.get(name, 0) + count
    if data_bytes:
        total["data set" if copies == 1 else f"{copies} workers' copies of the data set"] = (
            data_bytes * copies)
    return total


def _parts_text(parts: dict[str, int]) -> str:
    """"weights 44.8MB + momentum 44.7MB + activations 1.28GB": a floor's parts."""
    return " + ".join(f"{name} {bytes_text(count)}" for name, count in parts.items())


def _model_key(config: TrainConfig) -> tuple:
    return (config.model, config.num_classes, tuple(config.input_shape))
