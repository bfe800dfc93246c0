import torch
from torch import nn

from orchestrator.training.models import build_model


def _num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_lenet_is_the_books_network():
    model = build_model("lenet", seed=0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(20, (3, 3)), (50, (5, 5))]
    assert [(l.in_features, l.out_features) for l in linears] == [(800, 128), (128, 10)]
    assert sum(isinstance(m, nn.AvgPool2d) for m in model.modules()) == 2
    assert _num_parameters(model) == 129_068
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_init_is_normal_with_std_0_01_and_zero_bias():
    model = build_model("lenet", seed=0)
    weight = model[7].weight  # the 800x128 dense layer: enough samples for a tight estimate
    assert abs(weight.std().item() - 0.01) < 0.0005
    assert abs(weight.mean().item()) < 0.0005
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear)))


def test_resnet18_variant_is_eager_with_a_small_stem():
    model = build_model("resnet18", seed=0)
    assert not any(isinstance(m, nn.modules.lazy.LazyModuleMixin) for m in model.modules())
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    stem = model[0]
    assert (stem.kernel_size, stem.stride, stem.padding) == ((3, 3), (1, 1), (1, 1))
    assert abs(_num_parameters(model) - 11.2e6) < 0.1e6
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_same_seed_same_weights():
    a, b = build_model("lenet", seed=3), build_model("lenet", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
