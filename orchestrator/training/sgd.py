"""torch.optim.SGD that does not import torch._dynamo: the same update, state and
state_dict, one import less in a worker process (but `ddp`'s: torch's
DistributedDataParallel reads a setting of torch._dynamo's when it is built).

torch.optim wraps `Optimizer.add_param_group` (called by the constructor),
`zero_grad`, `state_dict` and `load_state_dict` in `torch._disable_dynamo`, and
`SGD.step` in `_use_grad_for_differentiable`. Both import torch._dynamo at their
first call, only to keep a `torch.compile` from tracing into the optimizer. That
import took 1.9 s in a process alone on a 2-core AMD EPYC without AVX-512, and
4.2-4.4 s in each of a 2-worker trial's two workers, which import it at once
(`-X importtime`, 2026-11-30): the largest import of a trial's start, paid
again by every trial, since every trial's workers are new processes.

No step of ours is compiled. So, while nothing in the process has imported
torch._dynamo, `SGD` calls the undecorated methods (the `__wrapped__` that
functools.wraps keeps), and `step` runs under `torch.no_grad()`, which is what
the wrapper sets for an optimizer that is not `differentiable`. Once torch._dynamo
is imported (a model of the user's that compiles itself, say), the import is
paid and every call goes through torch's own wrappers again (not through
`super()`: an optimizer's step hooks would run twice).

The wrappers' layout is torch's, not its API: where a torch lays them out
otherwise (`DYNAMO_FREE` is False), `SGD` is torch.optim.SGD unchanged.
"""

import sys

import torch

_OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def _torch_wrapper(cls: type, name: str, wrapper_owner: str):
    """`cls.name` as wrapped by `wrapper_owner`'s wrapper (a function of
    torch.optim.optimizer), found through the wrappers around it (an optimizer
    built wraps its class's `step` in its hooks), else None."""
    method = cls.__dict__.get(name)
    while method is not None:
        # The code's own name: functools.wraps gave the wrapper the wrapped one's.
        code = getattr(method, "__code__", None)
        if getattr(code, "co_qualname", "").startswith(wrapper_owner):
            return method if getattr(method, "__wrapped__", None) is not None else None
        method = getattr(method, "__wrapped__", None)
    return None


def _undecorated(cls: type, name: str, wrapper_owner: str):
    """The function that torch wrapped in `wrapper_owner`'s wrapper as `cls.name`."""
    wrapper = _torch_wrapper(cls, name, wrapper_owner)
    return None if wrapper is None else wrapper.__wrapped__


_PLAIN = {name: _undecorated(torch.optim.Optimizer, name, "_disable_dynamo.")
          for name in _OPTIMIZER_METHODS}
_TORCH_STEP = _torch_wrapper(torch.optim.SGD, "step", "_use_grad_for_differentiable.")
_PLAIN_STEP = None if _TORCH_STEP is None else _TORCH_STEP.__wrapped__
DYNAMO_FREE = _PLAIN_STEP is not None and all(_PLAIN.values())


def _dynamo_imported() -> bool:
    return "torch._dynamo" in sys.modules


class SGD(torch.optim.SGD):
    """torch.optim.SGD, minus the import of torch._dynamo (module docstring)."""

    def __init__(self, params, *args, **hyperparameters):
        if hyperparameters.get("differentiable"):
            raise ValueError("SGD here steps without autograd: differentiable=True is "
                             "torch.optim.SGD's alone")
        super().__init__(params, *args, **hyperparameters)

    def add_param_group(self, param_group):
        if not DYNAMO_FREE or _dynamo_imported():
            return super().add_param_group(param_group)
        return _PLAIN["add_param_group"](self, param_group)

    def zero_grad(self, set_to_none: bool = True):
        if not DYNAMO_FREE or _dynamo_imported():
            return super().zero_grad(set_to_none)
        return _PLAIN["zero_grad"](self, set_to_none)

    def state_dict(self):
        if not DYNAMO_FREE or _dynamo_imported():
            return super().state_dict()
        return _PLAIN["state_dict"](self)

    def load_state_dict(self, state_dict):
        if not DYNAMO_FREE or _dynamo_imported():
            return super().load_state_dict(state_dict)
        return _PLAIN["load_state_dict"](self, state_dict)

    def step(self, closure=None):
        if not DYNAMO_FREE:
            return super().step(closure)
        if _dynamo_imported():
            return _TORCH_STEP(self, closure)
        with torch.no_grad():
            return _PLAIN_STEP(self, closure)
