"""Models and data sets of a user's own, good and bad, as `--model` and `--dataset`
name them (`own_code:<function>`, importable from tests/); test_own_model.py
uses them."""

import numpy as np
import torch
from torch import nn

NOT_A_FUNCTION = 3


def mlp(num_classes, input_shape):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.ReLU(),
                         nn.Linear(32, num_classes))


def returns_a_string(num_classes, input_shape):
    return "not a module"


def eager_wrong_logits(num_classes, input_shape):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, num_classes + 1))


def lazy(num_classes, input_shape):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))


class _WithASpareLayer(nn.Module):
    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.used = mlp(num_classes, input_shape)
        self.spare = nn.Linear(4, 4)  # never called: its parameters get no gradient

    def forward(self, images):
        return self.used(images)


def unused_parameters(num_classes, input_shape):
    return _WithASpareLayer(num_classes, input_shape)


def raises(num_classes, input_shape):
    raise RuntimeError("no such width")


def passes_the_shape_on(num_classes, input_shape):
    """A builder that names input_shape and hands it to a class that takes none:
    its own TypeError is the one to see."""
    return nn.Linear(num_classes, num_classes, input_shape=input_shape)


def classes_only(num_classes):
    """For 1x20x20 images, a builder of the classes alone."""
    return nn.Sequential(nn.Flatten(), nn.Linear(400, num_classes))


def _pixels(count: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, *shape), dtype=np.uint8)


def grey_pairs():
    """A pair of uint8 arrays N x H x W and integer tensors: 3 classes."""
    train = (_pixels(96, (20, 20), 0), torch.arange(96) % 3)
    test = (_pixels(30, (20, 20), 1), torch.arange(30) % 3)
    return train, test


def colour_datasets():
    """Map-style Datasets of (float tensor C x H x W, int): 5 classes, 3x16x16."""
    generator = torch.Generator().manual_seed(0)
    train = torch.utils.data.TensorDataset(torch.randn(40, 3, 16, 16, generator=generator),
                                           torch.arange(40) % 5)
    test = torch.utils.data.TensorDataset(torch.randn(10, 3, 16, 16, generator=generator),
                                          torch.arange(10) % 5)
    return train, test


def shapes_differ():
    return (_pixels(8, (20, 20), 0), np.zeros(8)), (_pixels(4, (24, 24), 1), np.zeros(4))


def labels_short():
    return (_pixels(8, (20, 20), 0), np.arange(7) % 2), (_pixels(4, (20, 20), 1), np.arange(4) % 2)


def negative_labels():
    return (_pixels(8, (20, 20), 0), np.arange(8) - 1), (_pixels(4, (20, 20), 1), np.arange(4))


def one_class():
    return (_pixels(8, (20, 20), 0), np.zeros(8, int)), (_pixels(4, (20, 20), 1), np.zeros(4, int))


def one_class_of_three():
    """Every label 3: one class, though the largest label says four."""
    return ((_pixels(8, (20, 20), 0), np.full(8, 3)), (_pixels(4, (20, 20), 1), np.full(4, 3)))


def stray_label():
    labels = np.arange(8) % 2
    labels[5] = 10**9
    return (_pixels(8, (20, 20), 0), labels), (_pixels(4, (20, 20), 1), np.arange(4) % 2)


def channels_last():
    return ((np.zeros((8, 28, 28, 3), np.uint8), np.arange(8) % 2),
            (np.zeros((4, 28, 28, 3), np.uint8), np.arange(4) % 2))


def sorted_by_class():
    """The first half class 0, the second class 1: a small --train-limit sees one."""
    return ((_pixels(8, (20, 20), 0), np.repeat([0, 1], 4)),
            (_pixels(4, (20, 20), 1), np.arange(4) % 2))


def not_finite():
    images = np.zeros((8, 1, 20, 20), dtype=np.float32)
    images[3, 0, 2, 2] = np.nan
    return (images, np.arange(8) % 2), (images[:4], np.arange(4) % 2)


def not_a_pair():
    return [1, 2, 3]


def upsampled(num_classes, input_shape):
    """A model of a few parameters whose first layer keeps a 32x larger image
    per image for backward (3.2 MB for Fashion-MNIST's): a batch of thousands
    a worker cannot fit in a node's memory."""
    channels, height, width = input_shape
    return nn.Sequential(nn.Upsample(scale_factor=32),
                         nn.Conv2d(channels, 1, kernel_size=32, stride=32), nn.Flatten(),
                         nn.Linear(height * width, num_classes))


class _Attention(nn.Module):
    """Images as 2 heads of 64 tokens of 4 values, attending to themselves."""

    def __init__(self, num_classes, dropout):
        super().__init__()
        self.dropout = dropout
        self.project = nn.Linear(4, 4)
        self.classify = nn.Linear(2 * 64 * 4, num_classes)

    def forward(self, images):
        tokens = self.project(images.reshape(images.shape[0], 2, 64, 4))
        attended = nn.functional.scaled_dot_product_attention(tokens, tokens, tokens,
                                                              dropout_p=self.dropout)
        return self.classify(attended.flatten(1))


def attention(num_classes, input_shape):
    return _Attention(num_classes, dropout=0.5)


def encoder_layer(num_classes, input_shape):
    """torch's own transformer layer (nn.MultiheadAttention inside) on 64 tokens of
    8 values, with its default dropout."""
    return nn.Sequential(nn.Flatten(), nn.Unflatten(1, (64, 8)),
                         nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), nn.Flatten(),
                         nn.Linear(64 * 8, num_classes))


def dropout(num_classes, input_shape):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32),
                         nn.Dropout(0.5), nn.Linear(32, num_classes))


class _DropsThroughTorch(nn.Module):
    """`dropout`'s layers, its dropout called as torch.dropout."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.layers = dropout(num_classes, input_shape)

    def forward(self, images):
        hidden = self.layers[1](self.layers[0](images))
        return self.layers[3](torch.dropout(hidden, 0.5, self.training))


def drops_through_torch(num_classes, input_shape):
    return _DropsThroughTorch(num_classes, input_shape)


class _LogsStatistics(nn.Module):
    """The mlp, logging a statistic of a wide transform of its hidden values:
    detached, its graph is freed as soon as it is made."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.used = mlp(num_classes, input_shape)
        self.logged = []

    def forward(self, images):
        hidden = self.used[1](self.used[0](images))
        self.logged = [torch.tanh(hidden.repeat(1, 64)).detach().mean()]
        return self.used[3](self.used[2](hidden))


def logs_statistics(num_classes, input_shape):
    return _LogsStatistics(num_classes, input_shape)


class _Standardised(nn.Module):
    """The mlp on images less a mean kept in float64 (numpy's float), as the workers
    cast it: to fp32."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.used = mlp(num_classes, input_shape)
        self.register_buffer("mean", torch.from_numpy(np.full(input_shape, 0.5)))

    def forward(self, images):
        return self.used(images - self.mean)


def standardised(num_classes, input_shape):
    return _Standardised(num_classes, input_shape)


class _Recurrent(nn.Module):
    """An LSTM over an image's rows (a row of values a step), classified from its
    last output."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.lstm = nn.LSTM(input_shape[2], 16, batch_first=True)
        self.classify = nn.Linear(16, num_classes)

    def forward(self, images):
        output, _ = self.lstm(images.flatten(1, 2))
        return self.classify(output[:, -1])


def recurrent(num_classes, input_shape):
    return _Recurrent(num_classes, input_shape)


class _FailsInTraining(nn.Module):
    """Scores a batch in evaluation; in training, fails once it has attended."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.classify = nn.Linear(input_shape[1] * input_shape[2] * input_shape[0], num_classes)

    def forward(self, images):
        if self.training:
            nn.functional.dropout(nn.functional.scaled_dot_product_attention(
                images, images, images), 0.5)
            raise RuntimeError("training needs a GPU")
        return self.classify(images.flatten(1))


def fails_in_training(num_classes, input_shape):
    return _FailsInTraining(num_classes, input_shape)


def on_cuda(num_classes, input_shape):
    """Put on a GPU by its builder, as many a user's script does."""
    return mlp(num_classes, input_shape).cuda()


class _MakesOnCuda(nn.Module):
    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.mlp = mlp(num_classes, input_shape)

    def forward(self, x):
        return self.mlp(x) + torch.zeros(1, device="cuda")


def forward_on_cuda(num_classes, input_shape):
    """Its forward makes a tensor on CUDA, whatever its input's device."""
    return _MakesOnCuda(num_classes, input_shape)
