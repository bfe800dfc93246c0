"""Where a trial's workers go: whole nodes of its own, by Ray's placement groups.

On a cluster of like nodes, each worker of a trial asks for its node's whole
CPU divided by the workers the trial puts there, so that the trial's
placement group fills every node it uses and no other trial's worker fits
beside it. A trial that fits in one node packs there (STRICT_PACK); a larger
one takes the fewest whole nodes that hold it with the same number of
workers on each (PACK). Ray, not this module, picks the nodes; Tune then runs
as many trials at once as there are nodes. The reservation is about
exclusivity: a worker still runs `threads_per_worker` torch threads.
"""

import math
from dataclasses import dataclass

from orchestrator.config.options import workers_per_gpu

# Ray counts resources in units of 1e-4: a share is rounded down to one, so
# that `workers_per_node` shares never ask for more than the node has.
RESOURCE_UNIT = 1e-4


def node_capacity(node: dict[str, float], resources_per_worker: dict[str, float]) -> int:
    """How many such workers one node holds. A share of a GPU below one is taken
    from a single GPU: Ray counts GPUs as unit instances and gives no worker a
    fraction split over two (at 0.6 each, 8 GPUs hold 8 workers, not 13: a
    placement group of 13 is never ready). Ray counts a share to RESOURCE_UNIT."""
    def held(name: str, amount: float) -> int:
        available = node.get(name, 0.0)
        if name == "GPU" and amount < 1:
            return math.floor(available + 1e-9) * workers_per_gpu(amount)
        return math.floor(available / amount)
    return min((held(name, amount) for name, amount in resources_per_worker.items()
                if amount > 0), default=0)


def gpus_needed(num_workers: int, share: float) -> float:
    """The GPUs `num_workers` workers of `share` each take, each share from one GPU
    (`node_capacity`): 13 at 0.6 take 13, 13 at 0.5 take 7."""
    if share >= 1:
        return num_workers * share
    return math.ceil(num_workers / workers_per_gpu(share))


def gpu_share(workers_per_gpu: int) -> float:
    """The --gpus-per-worker that puts `workers_per_gpu` workers on a GPU, as a
    person types it: 1/n rounded down to three significant digits, so that Ray
    fits n, not n - 1 (1/6 is 0.166; 0.167 fits 5)."""
    share = 1 / workers_per_gpu
    decimals = min(4, 2 - math.floor(math.log10(share)))
    return math.floor(share * 10 ** decimals + 1e-9) / 10 ** decimals


@dataclass(frozen=True)
class Placement:
    """A trial's worker group as Ray Train places it (ScalingConfig's fields)."""

    resources_per_worker: dict[str, float]
    strategy: str
    """Ray's placement-group strategy: STRICT_PACK (one node) or PACK (whole nodes)."""
    num_nodes: int
    workers_per_node: int

    def to_dict(self) -> dict:
        return {"resources_per_worker": dict(self.resources_per_worker),
                "strategy": self.strategy, "num_nodes": self.num_nodes,
                "workers_per_node": self.workers_per_node}


def alike_nodes(node_resources: tuple[dict[str, float], ...],
                resources_per_worker: dict[str, float]) -> tuple[dict[str, float], int] | None:
    """The nodes that can hold a worker, if they are alike in what a worker asks
    for: (one such node's resources, how many nodes); None when they differ."""
    names = [name for name, amount in resources_per_worker.items() if amount > 0]
    usable = [node for node in node_resources
              if all(node.get(name, 0.0) >= resources_per_worker[name] for name in names)]
    shapes = {tuple(node.get(name, 0.0) for name in names) for node in usable}
    if len(shapes) != 1:
        return None
    return usable[0], len(usable)


def whole_nodes(node: dict[str, float], num_nodes: int, num_workers: int,
                resources_per_worker: dict[str, float]) -> Placement | None:
    """`num_workers` workers on whole nodes like `node` (of which there are
    `num_nodes`), the same number on each; None when no such split fits."""
    capacity = node_capacity(node, resources_per_worker)
    nodes_needed = math.ceil(num_workers / capacity)
    # 6 workers on nodes of 4: two nodes of 3, not 4 + 2 (a half-used node
    # would take another trial's worker).
    num_nodes_used = next((count for count in range(nodes_needed, num_nodes + 1)
                           if num_workers % count == 0), None)
    if num_nodes_used is None:
        return None
    workers_per_node = num_workers // num_nodes_used
    # The node's CPUs shared out; a GPU worker keeps one GPU, since Ray gives
    # a fractional GPU over 1 no device of its own, and the CPUs keep others off.
    share = math.floor(node["CPU"] / workers_per_node / RESOURCE_UNIT) * RESOURCE_UNIT
    resources = {**resources_per_worker, "CPU": round(share, 4)}
    return Placement(resources_per_worker=resources,
                     strategy="STRICT_PACK" if num_nodes_used == 1 else "PACK",
                     num_nodes=num_nodes_used, workers_per_node=workers_per_node)
