"""What every run builds the same way, wherever it runs (the loop, calibration's
probes, `auto`'s layout timing, the equivalence check, the benchmarks): its network
from its seed, its SGD, and cuDNN's settings. Nothing here may import ray.
"""

import torch
from torch import nn

from orchestrator.config.options import TrainConfig
from orchestrator.training.models import build_model
from orchestrator.training.sgd import SGD


def set_cudnn(config: TrainConfig) -> None:
    """cuDNN as a GPU run uses it, set in this process (calibration's probes too).

    Every training step has the same shapes (the partial last batch is dropped),
    so cuDNN's search for its fastest convolutions (`benchmark`) pays once; a
    proportional split's, once a share (split.py leaves it out of the speeds).
    fp32's convolutions and recurrent layers run in TensorFloat-32 (PyTorch's
    default) or in IEEE fp32 (--no-tf32, and the equivalence check, whose fp32
    tolerance TF32's rounding may exceed). Set through `allow_tf32`, the flag
    torch's own `cudnn.flags()` reads: setting `cudnn.conv.fp32_precision` apart
    from it makes that read raise (torch 2.14), in a user's model too. Under it,
    cuDNN's own fp32 setting is IEEE, so that off means off even where something
    set the global one (`torch.backends.fp32_precision`) to TF32.
    """
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.fp32_precision = "ieee"
    torch.backends.cudnn.allow_tf32 = config.tf32


def model_of(config: TrainConfig) -> nn.Module:
    """The run's network, fresh from its seed, for its data set's classes and images."""
    return build_model(config.model, seed=config.seed, num_classes=config.num_classes,
                       input_shape=config.input_shape)


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    """The run's SGD, built in this one place so every sync strategy steps the same one
    (torch.optim.SGD's update; training/sgd.py says why not that class itself)."""
    return SGD(params, lr=config.lr, momentum=config.momentum)
