"""The parameters split into k parts, one per worker: `--sync sharded` (13.5, exercise 3).

The book's exercise asks for an allreduce "that aggregates different
parameters on different GPUs". Each of k workers owns 1/k of the flattened
parameters and of the optimizer's state (ZeRO stage 1, FSDP's
SHARD_GRAD_OP), and a step is, written from the collectives:

    reduce_scatter_(flat_grad)  # worker r receives the summed gradient of part r only
    optimizer.step()            # SGD on part r: 1/k of the update and of its state
    all_gather_(flat_param)     # every worker receives every updated part

The parameters and their gradients live in two flat buffers, padded to k
equal parts (a collective's parts must be equal in size); every parameter
and its `.grad` is a view into them, so backward, the reduce-scatter and
the all-gather all work on the model's own memory. BatchNorm's running
statistics are buffers, not parameters: they stay per worker, as with the
other strategies. No Ray here, and no import of sync.py (which uses this).
"""

import torch
from torch import nn

from orchestrator.training.sgd import SGD
from orchestrator.training.sync.collectives import (all_gather_, get_rank, get_world_size, reduce_scatter_,
                                      views_like)


class ParameterShards:
    """A model's parameters in one flat buffer, this worker's part of them, and an
    SGD over that part only: built from the full-model `optimizer`, whose
    hyperparameters it follows and whose state (say, after a resume) it takes over."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.SGD, device: torch.device):
        self.params = list(model.parameters())
        (group,) = optimizer.param_groups
        assert isinstance(optimizer, torch.optim.SGD) and len(group["params"]) == len(self.params) \
            and all(a is b for a, b in zip(group["params"], self.params))
        dtype = self.params[0].dtype
        assert all(p.dtype == dtype for p in self.params), "one flat buffer holds one dtype"
        num_workers = get_world_size()
        numel = sum(p.numel() for p in self.params)
        part_numel = -(-numel // num_workers)  # the last part is padded with zeros
        self.flat_param = torch.zeros(num_workers * part_numel, dtype=dtype, device=device)
        self.flat_grad = torch.zeros_like(self.flat_param)
        with torch.no_grad():
            for param, param_view, grad_view in zip(
                    self.params, views_like(self.params, self.flat_param),
                    views_like(self.params, self.flat_grad)):
                param_view.copy_(param)
                param.data = param_view
                param.grad = grad_view
        # This worker's part: a view, so the optimizer updates the flat buffer
        # itself; its gradient is where the reduce-scatter leaves the sum.
        self.own_param = self.flat_param.view(num_workers, part_numel)[get_rank()]
        self.own_param.grad = self.flat_grad.view(num_workers, part_numel)[get_rank()]
        self.optimizer = SGD([self.own_param], **_hyperparameters(optimizer))
        for key in _state_keys(optimizer):  # SGD's: momentum_buffer, once it has stepped
            flat = torch.zeros_like(self.flat_param)
            for param, view in zip(self.params, views_like(self.params, flat)):
                view.copy_(optimizer.state[param][key])
            self.optimizer.state[self.own_param][key] = flat.view(num_workers, -1)[get_rank()].clone()
        optimizer.state.clear()  # held in parts from now on

    def reduce_scatter_grads(self) -> None:
        reduce_scatter_(self.flat_grad)

    def step(self, optimizer: torch.optim.SGD) -> None:
        """The SGD update of this worker's part, with `optimizer`'s current
        hyperparameters (a warm-up changes its lr every step)."""
        self.optimizer.param_groups[0].update(_hyperparameters(optimizer))
        self.optimizer.step()

    def all_gather_params(self) -> None:
        all_gather_(self.flat_param)

    def zero_grad(self) -> None:
        self.flat_grad.zero_()  # in place: the gradients are views into it

    def full_state_dict(self, optimizer: torch.optim.SGD) -> dict:
        """`optimizer.state_dict()` as if it had stepped the whole model itself:
        every part's state all-gathered. A collective call."""
        state_dict = optimizer.state_dict()
        for key, part in self.optimizer.state[self.own_param].items():
            flat = torch.empty_like(self.flat_param)
            flat.view(get_world_size(), -1)[get_rank()].copy_(part)
            all_gather_(flat)
            # Views of `flat`, not copies: one whole state in memory, once an epoch.
            for index, view in enumerate(views_like(self.params, flat)):
                state_dict["state"].setdefault(index, {})[key] = view
        return state_dict


def _hyperparameters(optimizer: torch.optim.Optimizer) -> dict:
    (group,) = optimizer.param_groups
    return {key: value for key, value in group.items() if key != "params"}


def _state_keys(optimizer: torch.optim.Optimizer) -> list[str]:
    return list(next(iter(optimizer.state.values()), {}))
