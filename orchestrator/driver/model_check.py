"""The user's model, or a book's on another data set, built and run on the
driver before Ray starts: refused in one line where the workers could not
train it, and its size kept for the plan's lines."""

from orchestrator.config.options import TrainConfig


# The parameter counts of the models `check_model` built, for the plan's lines.
_PARAMETERS: dict[tuple, int] = {}


def check_model(config: TrainConfig, syncs: tuple[str, ...] = ()) -> None:
    """The user's model, or a book's on another data set, built and run on a batch
    of two here: one line for one the workers could not train with the run's or
    the sweep's `syncs` (models.check_model). The book's on Fashion-MNIST need no
    check, nor torch's import."""
    if config.is_book_model:
        return
    from orchestrator.training.models import check_model as build_and_run
    _PARAMETERS[_model_key(config)] = build_and_run(
        config.model, num_classes=config.num_classes, input_shape=config.input_shape,
        syncs=syncs or (config.sync,))


def parameters_text(config: TrainConfig) -> str:
    """" (208M parameters, 833M bytes a replica in fp32)" for a model `check_model`
    built; empty for the book's on Fashion-MNIST (LeNet 61.7k, ResNet-18 11.2M)."""
    count = _PARAMETERS.get(_model_key(config))
    if count is None:
        return ""
    return f" ({_si(count)} parameters, {_si(count * 4)} bytes a replica in fp32)"


def _si(value: float) -> str:
    """3 significant digits and an SI prefix: 13.1k, 833M, 1M (999,600), 100."""
    value = float(f"{value:.3g}")
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g}{prefix}"
    return f"{value:.3g}"


def _model_key(config: TrainConfig) -> tuple:
    return (config.model, config.num_classes, tuple(config.input_shape))
