"""The driver's check that torch on each GPU node can use its GPU
(driver/device_check.py), with Ray's calls stubbed: which nodes are asked, what
a refusal says, and what is not refused (a node that does not answer, a task that
failed). tests/cluster/test_sweep_script_on_ray.py runs it on a real Ray."""

import pytest
import ray

from orchestrator.driver import device_check
from orchestrator.errors import UserError

CPU_NODE = {"NodeID": "a" * 56, "Alive": True, "NodeManagerAddress": "10.0.0.1",
            "Resources": {"CPU": 8.0}}
GPU_NODE = {"NodeID": "b" * 56, "Alive": True, "NodeManagerAddress": "10.0.0.2",
            "Resources": {"CPU": 16.0, "GPU": 8.0}}
DEAD_GPU_NODE = {**GPU_NODE, "NodeID": "c" * 56, "Alive": False}


class _FakeRay:
    """`ray.remote(...)(function).options(...).remote()` gives each node's answer
    as its ref; `wait` says which answered; `get` gives the answer or raises it."""

    def __init__(self, monkeypatch, nodes, answers: dict, unanswered=()):
        self.asked, self.cancelled = [], []
        self.answers, self.unanswered = answers, set(unanswered)
        monkeypatch.setattr(ray, "nodes", lambda: nodes)
        monkeypatch.setattr(ray, "remote", self._remote)
        monkeypatch.setattr(ray, "wait", self._wait)
        monkeypatch.setattr(ray, "cancel", lambda ref, force: self.cancelled.append(ref))
        monkeypatch.setattr(ray, "get", self._get)

    def _remote(self, **resources):
        assert resources == {"num_cpus": 0, "num_gpus": device_check.GPU_SLIVER,
                             "max_retries": 0}
        fake = self

        class _Task:
            def options(self, scheduling_strategy):
                node_id = scheduling_strategy.node_id

                class _Bound:
                    def remote(self):
                        fake.asked.append(node_id)
                        return node_id
                return _Bound()
        return lambda function: _Task()

    def _wait(self, refs, num_returns, timeout):
        assert num_returns == len(refs) and timeout == device_check.CHECK_TIMEOUT_S
        return ([ref for ref in refs if ref not in self.unanswered],
                [ref for ref in refs if ref in self.unanswered])

    def _get(self, ref):
        answer = self.answers[ref]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_only_live_gpu_nodes_are_asked_and_one_that_cannot_is_refused(monkeypatch):
    cause = "torch 2.14.1 (built for CUDA 13.0) cannot use it: Found no NVIDIA driver"
    fake = _FakeRay(monkeypatch, [CPU_NODE, GPU_NODE, DEAD_GPU_NODE],
                    {GPU_NODE["NodeID"]: (cause, None, None)})
    with pytest.raises(UserError) as refused:
        device_check.require_usable_gpus()
    assert fake.asked == [GPU_NODE["NodeID"]]
    assert str(refused.value) == (f"node 10.0.0.2 has 8 GPU(s) for Ray, but {cause}: "
                                  f"{device_check.WAYS_OUT}")


def test_nothing_is_asked_of_a_cluster_without_gpus(monkeypatch):
    fake = _FakeRay(monkeypatch, [CPU_NODE], {})
    assert device_check.require_usable_gpus() is None
    assert fake.asked == []


def test_a_node_that_can_passes_and_one_that_does_not_answer_is_named_not_refused(
        monkeypatch, capsys):
    other = {**GPU_NODE, "NodeID": "d" * 56, "NodeManagerAddress": "10.0.0.3"}
    fake = _FakeRay(monkeypatch, [GPU_NODE, other], {GPU_NODE["NodeID"]: (None, 80e9, None)},
                    unanswered={other["NodeID"]})
    assert device_check.require_usable_gpus() is None  # the other may have the larger GPU
    _FakeRay(monkeypatch, [GPU_NODE, other], {GPU_NODE["NodeID"]: (None, 80e9, None),
                                              other["NodeID"]: (None, 141e9, None)})
    assert device_check.require_usable_gpus() == 141e9  # the memory check's room
    assert fake.cancelled == [other["NodeID"]]
    assert capsys.readouterr().out == (
        f"GPU check: 10.0.0.3 did not answer within {device_check.CHECK_TIMEOUT_S:g} s (its "
        f"GPUs all taken?): not checked\n")


def test_a_bf16_run_is_told_which_gpus_emulate_bfloat16(monkeypatch, capsys):
    t4 = "Tesla T4 (compute capability 7.5)"
    _FakeRay(monkeypatch, [GPU_NODE], {GPU_NODE["NodeID"]: (None, 15e9, t4)})
    assert device_check.require_usable_gpus({"fp32", "fp16"}) == 15e9
    assert capsys.readouterr().out == ""  # no bf16 run: nothing to say
    assert device_check.require_usable_gpus({"fp32", "bf16"}) == 15e9  # a line, not a refusal
    assert capsys.readouterr().out == (
        f"GPU check: 10.0.0.2's {t4} has no bfloat16 tensor cores (compute capability 8.0 "
        f"and later): --precision bf16 runs emulated there, slower than fp32; fp16 is its "
        f"half precision (--precision fp16)\n")


def test_a_check_task_that_failed_refuses_nothing(monkeypatch):
    _FakeRay(monkeypatch, [GPU_NODE], {GPU_NODE["NodeID"]: RuntimeError("worker died")})
    assert device_check.require_usable_gpus() is None


def test_the_check_says_why_torch_here_cannot_use_cuda(monkeypatch):
    """The function the nodes run, run here (no CUDA device on CI)."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_check.cuda_unusable() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    assert device_check.cuda_unusable() == (
        f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) cannot use it: "
        f"torch.cuda.is_available() is False")
