"""Before a GPU run starts on the cluster: can torch on each GPU node use its GPUs?

Ray counts a node's GPUs through NVML and hands them out whatever torch was
built for. A torch built for a newer CUDA than the node's NVIDIA driver (PyPI's
default wheels follow CUDA's newest) sees none, and Ray Train's first act, the
NCCL process group, would fail every worker of every trial with "ProcessGroupNCCL
is only supported with GPUs, no GPUs found!", retried to the end. One task per
GPU node, holding a sliver of a GPU so that Ray shows it one, asks torch; a node
that cannot is named in one line, before anything is written or started. Each
node that can says how much memory its GPU has: the memory check's room
(model_check.require_room_in_memory), and whether its tensor cores take bfloat16
(compute capability 8.0, Ampere, and later). Before that (a T4, a V100) torch runs
bfloat16 emulated, slower than fp32: a run in bf16 is told so in a line, and that
fp16 is those GPUs' half precision.
"""

from collections.abc import Collection

from orchestrator.driver.node_tasks import on_each_node
from orchestrator.errors import UserError

# How long the nodes' answers may take: a task per node, started at once. A node
# whose GPUs are all taken (another job's) does not answer in time: it is named
# in a line and not refused (workers that share a GPU meet worker.usable_device;
# whole-GPU workers, NCCL's own error).
CHECK_TIMEOUT_S = 60.0
GPU_SLIVER = 0.01
WAYS_OUT = ("install a torch for the node's NVIDIA driver (e.g. TORCH_INDEX_URL="
            "https://download.pytorch.org/whl/cu126 ./setup.sh: README), or run with "
            "--use-gpu no")


def require_usable_gpus(precisions: Collection[str] = ()) -> float | None:
    """Refuse, in one line, a cluster with a GPU node whose torch cannot use its GPU;
    else the most memory, in bytes, of the GPUs the nodes showed (one a node: a node
    of GPUs of several sizes is read by the one Ray chose), or None unless every GPU
    node answered (one that did not may hold the largest). Where `precisions` (the
    run's, or its sweep's) hold bf16, a line names each node whose GPU emulates it."""
    import ray

    nodes = [node for node in ray.nodes()
             if node["Alive"] and node["Resources"].get("GPU", 0) > 0]
    if not nodes:
        return None
    answers = on_each_node(_gpu_answer(), nodes, CHECK_TIMEOUT_S, num_gpus=GPU_SLIVER)
    unanswered = [answer.node["NodeManagerAddress"] for answer in answers
                  if not answer.answered]
    if unanswered:
        print(f"GPU check: {', '.join(unanswered)} did not answer within "
              f"{CHECK_TIMEOUT_S:g} s (its GPUs all taken?): not checked", flush=True)
    memories = []
    for answer in answers:
        if not answer.answered or answer.error is not None:
            continue  # the task's own failure says nothing of torch's view
        cause, memory_bytes, no_bf16 = answer.value
        node = answer.node
        if cause:
            raise UserError(
                f"node {node['NodeManagerAddress']} has "
                f"{node['Resources']['GPU']:g} GPU(s) for Ray, but {cause}: {WAYS_OUT}")
        if no_bf16 and "bf16" in precisions:
            print(f"GPU check: {node['NodeManagerAddress']}'s {no_bf16} has no bfloat16 "
                  f"tensor cores (compute capability 8.0 and later): --precision bf16 runs "
                  f"emulated there, slower than fp32; fp16 is its half precision "
                  f"(--precision fp16)", flush=True)
        memories.append(memory_bytes)
    return max(memories) if len(memories) == len(nodes) else None


def _gpu_answer():
    """A function a GPU node runs: why torch cannot use the GPU Ray showed it, and
    None twice; or None, that GPU's memory in bytes, and, where its tensor cores take
    no bfloat16, its name and compute capability (else None). Made here, as
    `_torch_cannot_use`."""
    cannot_use = _torch_cannot_use()

    def gpu_answer() -> tuple[str | None, int | None, str | None]:
        cause = cannot_use()
        if cause:
            return cause, None, None
        import torch
        gpu = torch.cuda.get_device_properties(0)
        # torch.cuda.is_bf16_supported(including_emulation=False)'s own test.
        native_bf16 = bool(torch.version.hip) or gpu.major >= 8
        return None, gpu.total_memory, (
            None if native_bf16 else f"{gpu.name} (compute capability {gpu.major}.{gpu.minor})")
    return gpu_answer


def _torch_cannot_use():
    """A function that says why torch cannot use the GPU Ray showed it, or None;
    made here so that Ray ships it by value: a node runs it without this package."""
    def torch_cannot_use() -> str | None:
        import torch
        if torch.cuda.is_available():
            return None
        return (f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) cannot "
                f"use it: {_cause(torch)}")

    def _cause(torch) -> str:
        try:
            torch.cuda.init()
        except Exception as error:  # torch's own words: driver too old, no driver, ...
            return str(error).splitlines()[0].rstrip(".")
        return "torch.cuda.is_available() is False"
    return torch_cannot_use


def cuda_unusable() -> str | None:
    """Why torch in this process cannot use CUDA, in the node check's words, or None."""
    return _torch_cannot_use()()
