"""Nodes an autoscaler has yet to start: asked for, and waited for, before the plan.

The plan is fitted to the nodes alive when the job attaches (plan.py). On a
cluster whose autoscaler starts nodes on demand (KubeRay's worker groups at
`minReplicas: 0`, `ray up` with `min_workers: 0`) those may hold none of the
GPUs the job is for: the plan would refuse its runs or leave them out.
`--wait-for-nodes S` asks the autoscaler for the runs' workers with Ray's
`request_resources` and waits up to S seconds for their nodes.

The request stands until it is replaced. Ray Train's autoscaling coordinator,
a detached actor on any cluster that has run a fit, replaces it with its own
every 20 s, so it is sent again at every look at the nodes. It is withdrawn
when the wait ends, however it ends, or it would keep the nodes up after the
job; the trials' fits then ask for their own workers. On a cluster shared with
other jobs, the withdrawal replaces their requests too until their next one.
"""

import dataclasses
import time

from orchestrator.driver.cluster import Cluster, alive_node_resources, resources_text
from orchestrator.errors import named_first_line
from orchestrator.records import counted

POLL_S = 2.0


def largest_runs(configs) -> dict[tuple, int]:
    """Per shape of worker (its resources, as sorted items), the most workers of it
    that one of `configs` (TrainConfigs with their GPU use settled) runs at once."""
    counts: dict[tuple, int] = {}
    for config in configs:
        shape = tuple(sorted(config.resources_per_worker.items()))
        counts[shape] = max(counts.get(shape, 0), config.num_workers)
    return counts


def wait_for_nodes(cluster: Cluster, configs, seconds: float) -> Cluster:
    """The cluster once it holds each of `configs`' runs (one at a time), or once
    `seconds` have passed: as it is then."""
    wanted = largest_runs(configs)

    def short(now: Cluster) -> bool:
        return any(now.max_workers(dict(shape)) < count for shape, count in wanted.items())

    def room(now: Cluster) -> str:
        return " and ".join(f"{min(now.max_workers(dict(shape)), count)} of the "
                            f"{counted(count, 'worker')}" for shape, count in wanted.items())

    asked = " and ".join(f"{counted(count, 'worker')} of {resources_text(dict(shape))}"
                         for shape, count in wanted.items())
    if not short(cluster):
        print(f"--wait-for-nodes: the nodes up hold the {asked} already")
        return cluster
    from ray.autoscaler.sdk import request_resources
    bundles = [dict(shape) for shape, count in wanted.items() for _ in range(count)]
    print(f"asking the cluster's autoscaler for {asked} (the nodes up hold {room(cluster)}) "
          f"and waiting up to {seconds:g} s for their nodes")
    started, now, seen = time.monotonic(), cluster, room(cluster)
    try:
        while short(now) and time.monotonic() - started < seconds:
            request_resources(bundles=bundles)
            time.sleep(POLL_S)
            now = dataclasses.replace(cluster, node_resources=alive_node_resources())
            if room(now) != seen:
                seen = room(now)
                print(f"after {time.monotonic() - started:.0f} s: {now.describe()}, "
                      f"room for {seen}")
    finally:
        try:
            request_resources(bundles=[])  # withdrawn: see the module's docstring
        except Exception as error:  # not to hide what ended the wait
            print(f"--wait-for-nodes: the request to the autoscaler was not withdrawn "
                  f"({named_first_line(error)}); it stands until another replaces it")
    if short(now):
        print(f"--wait-for-nodes: after {seconds:g} s the nodes up hold {room(now)}: the "
              f"plan is fitted to them")
    return now
