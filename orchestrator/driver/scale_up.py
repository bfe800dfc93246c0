"""Nodes an autoscaler has yet to start: asked for, and waited for, before the plan.

The plan is fitted to the nodes alive when the job attaches (plan.py). On a
cluster whose autoscaler starts nodes on demand (KubeRay's worker groups at
`minReplicas: 0`, `ray up` with `min_workers: 0`) those may hold none of the
GPUs the job is for: the plan would refuse, or leave the points out, or
`--use-gpu auto` would choose CPUs. `--wait-for-nodes S` asks the autoscaler
for the largest run's workers with Ray's `request_resources`, as Ray Train's
own fits ask for theirs, and waits up to S seconds for their nodes.

The request stands until it is replaced, and would keep the nodes up after the
job: it is withdrawn when the wait ends, however it ends. The trials' fits then
ask for their own workers. On a cluster shared with other jobs, the withdrawal
replaces their requests as well until their next one (Ray Train's are sent
again every 20 s).
"""

import dataclasses
import time

from orchestrator.driver.cluster import Cluster, alive_node_resources
from orchestrator.records import counted

POLL_S = 2.0


def wait_for_nodes(cluster: Cluster, configs, seconds: float, *,
                   gpu_from_cluster: bool) -> Cluster:
    """The cluster once it holds the workers of the largest of `configs` (TrainConfigs
    with their GPU use settled), or once `seconds` have passed: as it is then."""
    largest = max(configs, key=lambda config: config.num_workers)
    num_workers, resources = largest.num_workers, largest.resources_per_worker
    held = cluster.max_workers(resources)
    if gpu_from_cluster and not largest.use_gpu:
        print("--use-gpu auto: no GPU node is up, so CPU workers are asked for "
              "(--use-gpu yes asks the autoscaler for GPU nodes)")
    need = ", ".join(f"{amount:g} {name}" for name, amount in resources.items())
    if held >= num_workers:
        print(f"--wait-for-nodes: the nodes up hold the {counted(num_workers, 'worker')} "
              f"of {{{need}}} already")
        return cluster
    from ray.autoscaler.sdk import request_resources
    print(f"asking the cluster's autoscaler for {counted(num_workers, 'worker')} of {{{need}}} "
          f"(the nodes up hold {held}) and waiting up to {seconds:g} s for their nodes")
    started = time.monotonic()
    request_resources(bundles=[dict(resources) for _ in range(num_workers)])
    try:
        while True:
            time.sleep(POLL_S)
            waited = time.monotonic() - started
            now = dataclasses.replace(cluster, node_resources=alive_node_resources())
            if now.max_workers(resources) != held:
                held = now.max_workers(resources)
                print(f"after {waited:.0f} s: {now.describe()}, room for {held} of the "
                      f"{counted(num_workers, 'worker')}")
            if held >= num_workers or waited >= seconds:
                break
    finally:
        request_resources(bundles=[])  # withdrawn: see the module's docstring
    if held < num_workers:
        print(f"--wait-for-nodes: after {seconds:g} s the nodes up hold {held} of the "
              f"{counted(num_workers, 'worker')}: the plan is fitted to them")
    return now
