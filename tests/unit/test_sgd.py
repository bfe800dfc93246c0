"""The run's SGD is torch.optim.SGD's update, state and state_dict, bit for bit,
without importing torch._dynamo (training/sgd.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orchestrator.training import sgd
from orchestrator.training.models import build_model


def _trained(optimizer_class, momentum: float, steps: int = 4):
    model = build_model("lenet", seed=0).double()
    optimizer = optimizer_class(model.parameters(), lr=0.1, momentum=momentum)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        images = torch.randn(8, 1, 28, 28, dtype=torch.float64, generator=generator)
        optimizer.zero_grad()
        model(images).square().mean().backward()
        optimizer.step()
        if step == 1:  # a resume halfway: the state goes out and comes back
            state = optimizer.state_dict()
            optimizer = optimizer_class(model.parameters(), lr=0.1, momentum=momentum)
            optimizer.load_state_dict(state)
    return model, optimizer


def _assert_same(theirs, their_optimizer, ours, our_optimizer) -> None:
    for a, b in zip(theirs.parameters(), ours.parameters()):
        assert torch.equal(a, b)
    their_state, our_state = their_optimizer.state_dict(), our_optimizer.state_dict()
    assert our_state["param_groups"] == their_state["param_groups"]
    assert our_state["state"].keys() == their_state["state"].keys()
    for index, state in their_state["state"].items():
        assert state.keys() == our_state["state"][index].keys()
        for key, value in state.items():
            assert torch.equal(value, our_state["state"][index][key])


def test_without_dynamo_it_is_torch_s_update_state_and_state_dict():
    """In a process of its own: ours trains first, with torch._dynamo never
    imported (torch.optim.SGD imports it), then torch's, from the same start."""
    code = """if True:
        import sys
        from test_sgd import _assert_same, _trained
        from orchestrator.training import sgd
        import torch
        assert sgd.DYNAMO_FREE, "this torch wraps its optimizers otherwise"
        ours = {momentum: _trained(sgd.SGD, momentum) for momentum in (0.0, 0.9)}
        assert "torch._dynamo" not in sys.modules, "imported by its build, step or save"
        for momentum, trained in ours.items():
            _assert_same(*_trained(torch.optim.SGD, momentum), *trained)
        print("same")
    """
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "same"


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_with_dynamo_imported_it_is_torch_s_sgd_through_torch_s_wrappers(momentum):
    _assert_same(*_trained(torch.optim.SGD, momentum), *_trained(sgd.SGD, momentum))
    assert "torch._dynamo" in sys.modules  # imported by torch.optim.SGD


def test_step_hooks_run_once_a_step_either_way(monkeypatch):
    torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)  # hooks torch's SGD.step too
    model = torch.nn.Linear(3, 2)
    optimizer = sgd.SGD(model.parameters(), lr=0.1)
    calls = []
    optimizer.register_step_pre_hook(lambda *args: calls.append(1))
    for dynamo in (True, False):
        monkeypatch.setattr(sgd, "_dynamo_imported", lambda: dynamo)
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
    assert calls == [1, 1]


def test_torch_s_wrappers_are_found_behind_the_step_hooks_of_a_built_optimizer():
    torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)  # wraps SGD.step in hooks
    assert sgd._torch_wrapper(torch.optim.SGD, "step", "_use_grad_for_differentiable.") \
        is sgd._TORCH_STEP is not None
    assert sgd._undecorated(torch.optim.SGD, "step", "_use_grad_for_differentiable.") \
        is sgd._PLAIN_STEP is not None


def test_methods_torch_did_not_wrap_leave_it_torch_s_sgd():
    class Plain:
        def step(self):
            pass
    assert sgd._undecorated(Plain, "step", "_use_grad_for_differentiable.") is None


def test_once_dynamo_is_imported_torch_s_own_wrappers_run(monkeypatch):
    import torch._dynamo  # noqa: F401  (this process's torch.optim.SGD tests import it anyway)
    calls = []
    monkeypatch.setattr(sgd, "_PLAIN_STEP", lambda *args: calls.append(args))
    model = torch.nn.Linear(3, 2)
    optimizer = sgd.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    before = model.weight.detach().clone()
    optimizer.step()
    assert not calls and not torch.equal(model.weight, before)


def test_differentiable_is_refused():
    with pytest.raises(ValueError, match="differentiable"):
        sgd.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1, differentiable=True)
