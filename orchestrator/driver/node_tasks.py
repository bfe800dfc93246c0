"""One short task on each node, pinned there and started at once: how the checks
before a run ask every node what it sees (torch's view of its GPUs, the storage,
its own copy of the shipped code), each with its own question and timeout."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeAnswer:
    node: dict  # the node's entry in ray.nodes()
    answered: bool  # False: no answer within the timeout (its task cancelled)
    value: Any = None  # what the task returned
    error: Exception | None = None  # or the task's own failure, whatever it was


def on_each_node(function: Callable, nodes: Sequence[dict], timeout_s: float,
                 arguments: Callable[[dict], tuple] = lambda node: (),
                 num_gpus: float = 0.0) -> list[NodeAnswer]:
    """Run `function(*arguments(node))` once on each of `nodes` (entries of
    ray.nodes()), all at once, each pinned to its node and holding no CPU (so it
    runs on a node whose CPUs are all taken, or that has none) and `num_gpus`;
    give their answers in `nodes`' order. Ray ships `function` by value: it must
    be self-contained (a nested function that imports what it uses). A task that
    has not answered within `timeout_s` is cancelled, its node's answer unanswered;
    no task is retried."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not nodes:
        return []
    task = ray.remote(num_cpus=0, num_gpus=num_gpus, max_retries=0)(function)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(*arguments(node)) for node in nodes]
    ready, unready = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    for ref in unready:
        ray.cancel(ref, force=True)
    answers = []
    for ref, node in zip(refs, nodes):
        if ref not in ready:
            answers.append(NodeAnswer(node, answered=False))
            continue
        try:
            answers.append(NodeAnswer(node, answered=True, value=ray.get(ref)))
        except Exception as error:  # the task's own failure, told to the caller
            answers.append(NodeAnswer(node, answered=True, error=error))
    return answers
