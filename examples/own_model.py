"""A model and a data set of your own, as `--model` and `--dataset` take them:

    python experiments/sweep.py --model examples.own_model:cnn \
        --dataset examples.own_model:tops --workers 1,2 --epochs 2
    python experiments/train.py --model examples.own_model:cnn_batchnorm \
        --dataset examples.own_model:tops --workers 2 --check-equivalence

A model is a function called as `function(num_classes=N, input_shape=(C, H, W))`
that returns a `torch.nn.Module` mapping a batch [B, C, H, W] to logits
[B, N]; the workers call it on every node, seeded, and train what it returns.
A data set is a function of no arguments that returns `(train, test)`, each a
pair of tensors `(images, labels)` or a map-style Dataset of `(image, label)`;
the driver calls it once and shares the arrays with the workers.
"""

import torch
from torch import nn

# Fashion-MNIST's four kinds of tops, the classes it confuses most with each other.
TOPS = {0: "T-shirt/top", 2: "pullover", 4: "coat", 6: "shirt"}


def cnn(num_classes: int, input_shape: tuple[int, int, int]) -> nn.Module:
    """Two 3x3 convolution blocks and a linear classifier, with GroupNorm: its
    statistics are each example's own, so k workers train exactly as one device."""
    return _cnn(num_classes, input_shape, lambda channels: nn.GroupNorm(4, channels))


def cnn_batchnorm(num_classes: int, input_shape: tuple[int, int, int]) -> nn.Module:
    """The same network with BatchNorm, whose statistics are the batch's: on k
    workers each normalises by its own shard's, and training differs from one
    device's (`--check-equivalence` names the layers) unless they are synchronised
    (`--sync-batchnorm`, on GPUs)."""
    return _cnn(num_classes, input_shape, nn.BatchNorm2d)


def _cnn(num_classes: int, input_shape: tuple[int, int, int], norm) -> nn.Module:
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, kernel_size=3, padding=1), norm(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), norm(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (height // 4) * (width // 4), num_classes))


def tops():
    """Fashion-MNIST's four kinds of tops (24,000 training and 4,000 test images),
    padded to 32x32 and standardised with the training set's mean and spread,
    labelled 0 to 3: the training set as a map-style Dataset, the test set as a
    pair of tensors, the two forms `--dataset` takes."""
    from orchestrator.training import data  # the book's files, found as the sweep finds them

    fashion = data.load()

    def part(images, labels):
        keep = torch.isin(torch.from_numpy(labels.astype("int64")), torch.tensor(list(TOPS)))
        x = torch.from_numpy(images.copy())[keep].float().div_(255)
        x = nn.functional.pad(x, (2, 2, 2, 2)).unsqueeze(1)
        y = torch.from_numpy(labels.astype("int64"))[keep]
        return x, torch.bucketize(y, torch.tensor(sorted(TOPS)))

    train_x, train_y = part(fashion.train_images, fashion.train_labels)
    test_x, test_y = part(fashion.test_images, fashion.test_labels)
    mean, std = train_x.mean(), train_x.std()
    train = torch.utils.data.TensorDataset((train_x - mean) / std, train_y)
    return train, ((test_x - mean) / std, test_y)
