"""The book's two networks: LeNet of 13.5 and the ResNet-18 variant of 13.6.

Both are built from eager modules (no Lazy* layers) so that every parameter
exists before DistributedDataParallel or the first broadcast sees it.
"""

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 10


def lenet() -> nn.Sequential:
    """13.5's LeNet: conv 20@3x3, avg-pool, conv 50@5x5, avg-pool, dense 800-128-10."""
    return nn.Sequential(
        nn.Conv2d(1, 20, kernel_size=3), nn.ReLU(), nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(), nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Flatten(),
        nn.Linear(800, 128), nn.ReLU(),
        nn.Linear(128, NUM_CLASSES))


class Residual(nn.Module):
    """The residual block of the book's 8.6, with explicit input channels."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        # The 1x1 convolution matches the shortcut's shape when the block downsamples.
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride=stride)
                         if stride != 1 or in_channels != out_channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def resnet18(in_channels: int = 1, width: int = 64) -> nn.Sequential:
    """13.6's ResNet-18: a 3x3 stride-1 stem and no max-pooling, for 28x28 images.

    `width` is the first stage's channels (the book's 64; each stage doubles
    it); the tests build a narrow one, the same 18 layers at a fraction of the cost.
    """

    def stage(cin: int, cout: int, *, first: bool) -> nn.Sequential:
        return nn.Sequential(Residual(cin, cout, stride=1 if first else 2), Residual(cout, cout))

    return nn.Sequential(
        nn.Conv2d(in_channels, width, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(width), nn.ReLU(),
        stage(width, width, first=True), stage(width, 2 * width, first=False),
        stage(2 * width, 4 * width, first=False), stage(4 * width, 8 * width, first=False),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(8 * width, NUM_CLASSES))


BUILDERS = {"lenet": lenet, "resnet18": resnet18}


def build_model(name: str, *, seed: int) -> nn.Module:
    """A fresh network with the book's init: weights N(0, 0.01^2), biases zero.

    Workers still broadcast rank 0's weights afterwards; the seed only makes a
    run repeatable, it is not what keeps the replicas identical.
    """
    generator = torch.Generator().manual_seed(seed)
    model = BUILDERS[name]()
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            with torch.no_grad():
                module.weight.normal_(0.0, 0.01, generator=generator)
                module.bias.zero_()
    return model
