"""What the data set holds and how a global batch splits evenly: plain arithmetic
that the options, the workers and the report share (no numpy, no torch)."""

from dataclasses import dataclass

FASHION_MNIST = "fashion-mnist"
TRAIN_SIZE = 60_000
TEST_SIZE = 10_000


def shape_text(shape: tuple[int, ...]) -> str:
    """An image's (C, H, W) as the plan, the report and Tune's config write it:
    "1x28x28" (`parse_shape` reads it back)."""
    return "x".join(map(str, shape))


def parse_shape(shape: str | tuple | list) -> tuple[int, ...]:
    """`shape_text`'s form, a JSON list or a tuple, as a tuple of ints."""
    return tuple(int(size) for size in (shape.split("x") if isinstance(shape, str) else shape))


@dataclass(frozen=True)
class DataFacts:
    """What a run must know of its data set before it starts (the defaults:
    Fashion-MNIST's); training/datasets.py reads them from any other."""

    name: str = FASHION_MNIST
    train_size: int = TRAIN_SIZE
    test_size: int = TEST_SIZE
    input_shape: tuple[int, ...] = (1, 28, 28)
    num_classes: int = 10


def shard_bounds(total: int, num_shards: int, rank: int) -> tuple[int, int]:
    """[start, stop) of shard `rank` when `total` items are split as evenly as possible.

    The first `total % num_shards` shards get one extra item (as
    `torch.tensor_split` does), so shard sizes differ by at most one.
    """
    base, extra = divmod(total, num_shards)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def even_shares(total: int, num_shards: int) -> tuple[int, ...]:
    """The sizes of the `num_shards` shards of `shard_bounds`."""
    return tuple(stop - start for start, stop in
                 (shard_bounds(total, num_shards, rank) for rank in range(num_shards)))
