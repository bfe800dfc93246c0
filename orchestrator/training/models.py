"""The book's two networks, LeNet of 13.5 and the ResNet-18 variant of 13.6, and
the user's own: `--model package.module:function`.

The book's are built from eager modules (no Lazy* layers) so that every
parameter exists before DistributedDataParallel or the first broadcast sees
it; a user's model must be too (`check_model` says so in one line).
"""

import inspect
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.config.references import resolve
from orchestrator.errors import UserError, named_first_line
from orchestrator.training.memory import MemoryFloor, measure_floor

# Fashion-MNIST's: the book's models are drawn for it, and any other data set
# gives its own (the run's `num_classes` and `input_shape`).
NUM_CLASSES = 10
INPUT_SHAPE = (1, 28, 28)
# Where a user's builder or forward asks for CUDA in a process that has none (the
# driver's check on a CPU head node; a CPU worker), torch's error says one of these
# (its CUDA initialisation's), and the way out follows it. A builder that returns its
# model on a GPU (the driver's) is refused with BUILD_ON_THE_CPU.
NO_CUDA_HERE = ("Found no NVIDIA driver", "Torch not compiled with CUDA enabled",
                "No CUDA GPUs are available")
BUILD_ON_THE_CPU = ("build it on the CPU (no .cuda(), no .to('cuda')): the driver checks it "
                    "on its CPU before anything starts, and each worker moves it to its own "
                    "device")
FORWARD_ON_ITS_INPUT = ("make its forward put what it makes on its input's device (x.device), "
                        "not on CUDA: the driver runs a batch through it on its CPU before "
                        "anything starts, and each worker on its own device")


def lenet(num_classes: int = NUM_CLASSES,
          input_shape: tuple[int, ...] = INPUT_SHAPE) -> nn.Sequential:
    """13.5's LeNet: conv 20@3x3, avg-pool, conv 50@5x5, avg-pool, dense 800-128-10
    (on 28x28 images; other sizes change the first dense layer's 800 inputs)."""
    in_channels, *image_size = input_shape
    height, width = (((size - 2) // 2 - 4) // 2 for size in image_size)
    if min(height, width) < 1:
        raise UserError(f"LeNet needs images of at least 12x12 pixels, got "
                        f"{image_size[0]}x{image_size[1]}")
    # In place: no layer's backward reads the output a ReLU overwrites (a
    # convolution's and a dense layer's read their input; an average pool reads
    # its input, the ReLU's own result): the same values and gradients without the
    # activations' copies, 2% of LeNet's step on a CPU core (bench/lenet_step.py).
    return nn.Sequential(
        nn.Conv2d(in_channels, 20, kernel_size=3), nn.ReLU(inplace=True),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(inplace=True),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Flatten(),
        nn.Linear(50 * height * width, 128), nn.ReLU(inplace=True),
        nn.Linear(128, num_classes))


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


def resnet18(num_classes: int = NUM_CLASSES, input_shape: tuple[int, ...] = INPUT_SHAPE, *,
             width: int = 64) -> nn.Sequential:
    """13.6's ResNet-18: a 3x3 stride-1 stem and no max-pooling, for 28x28 images.

    `width` is the first stage's channels (the book's 64; each stage doubles
    it); the tests build a narrow one, the same 18 layers at a fraction of the cost.
    """

    def stage(cin: int, cout: int, *, first: bool) -> nn.Sequential:
        return nn.Sequential(Residual(cin, cout, stride=1 if first else 2), Residual(cout, cout))

    return nn.Sequential(
        nn.Conv2d(input_shape[0], width, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(width), nn.ReLU(),
        stage(width, width, first=True), stage(width, 2 * width, first=False),
        stage(2 * width, 4 * width, first=False), stage(4 * width, 8 * width, first=False),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(8 * width, num_classes))


# Called as the user's functions are: (num_classes=N, input_shape=(C, H, W)).
BUILDERS = {"lenet": lenet, "resnet18": resnet18}
BUILTIN = tuple(BUILDERS)


def is_reference(name: str) -> bool:
    """Whether `name` is the user's `package.module:function` (else a built-in's name)."""
    return name not in BUILTIN


def build_model(name: str, *, seed: int, num_classes: int = NUM_CLASSES,
                input_shape: tuple[int, ...] = INPUT_SHAPE) -> nn.Module:
    """A fresh network: the book's with the book's init (weights N(0, 0.01^2),
    biases zero); the user's as its function builds it, called with torch's
    generator seeded by `seed`, so that its own init repeats too.

    Workers still broadcast rank 0's weights afterwards; the seed only makes a
    run repeatable, it is not what keeps the replicas identical.
    """
    if is_reference(name):
        function = resolve(name, option="--model")
        arguments = {"num_classes": num_classes, "input_shape": tuple(input_shape)}
        takes_shape = _takes_input_shape(function)
        if takes_shape is False:  # a builder of the classes alone
            arguments.pop("input_shape")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                try:
                    model = function(**arguments)
                except TypeError as error:
                    # A builder of **kwargs that takes no image shape, as torchvision's
                    # models (`torchvision.models:resnet18`): the classes alone, seeded
                    # alike. One that names input_shape raised its own error: kept.
                    if takes_shape is not None or "input_shape" not in str(error):
                        raise
                    arguments.pop("input_shape")
                    torch.manual_seed(seed)
                    model = function(**arguments)
            except Exception as error:
                given = ", ".join(f"{key}={value}" for key, value in arguments.items())
                raise UserError(f"--model {name}: calling it with {given} raised "
                                f"{named_first_line(error)}"
                                f"{_way_out(error, BUILD_ON_THE_CPU)}") from None
        if not isinstance(model, nn.Module):
            raise UserError(f"--model {name} returned {type(model).__name__}, not a "
                            f"torch.nn.Module")
        return model
    model = BUILDERS[name](num_classes=num_classes, input_shape=tuple(input_shape))
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            with torch.no_grad():
                module.weight.normal_(0.0, 0.01, generator=generator)
                module.bias.zero_()
    return model


def _takes_input_shape(function) -> bool | None:
    """Whether a builder names `input_shape` (True) or takes neither it nor
    **kwargs (False); None where its signature cannot tell (**kwargs, a builtin)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    if "input_shape" in parameters:
        return True
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        return None
    return False


@dataclass(frozen=True)
class ModelFacts:
    """What the driver learnt of a model by building and running it (`check_model`)."""

    parameters: int
    """Its trainable parameters."""
    memory_floor: MemoryFloor | None
    """The least a worker's step holds, at any batch size (memory.py); None where the
    count failed (a model whose training mode runs on a GPU only): not checked."""


def check_model(name: str, *, num_classes: int, input_shape: tuple[int, ...],
                syncs: tuple[str, ...] = ()) -> ModelFacts:
    """Build the model once on the driver and run a batch of two through it: one
    line (UserError) for a model the workers could not train, before any starts;
    with `ddp` among `syncs`, also one whose parameters are not all used (DDP
    waits for every gradient and fails the step). Returns its parameter count and
    its step's memory floor, counted in training mode."""
    model = build_model(name, seed=0, num_classes=num_classes, input_shape=input_shape)
    # On a driver with a GPU, a builder's .cuda() would hold a CUDA context and cached
    # blocks on the GPU the workers are given, for the whole run; and CPU workers
    # could not build it.
    devices = sorted({str(tensor.device) for tensor in (*model.parameters(), *model.buffers())
                      if tensor.device.type != "cpu"})
    if devices:
        raise UserError(f"--model {name} returned a model on {', '.join(devices)}: "
                        f"{BUILD_ON_THE_CPU}")
    # In fp32, as the workers hold it (loop.py): a buffer built in numpy's float64 is cast.
    model = model.to(torch.float32)
    lazy = [type(module).__name__ for module in model.modules()
            if isinstance(module, nn.modules.lazy.LazyModuleMixin)]
    if lazy:
        raise UserError(f"--model {name} has lazy layers ({', '.join(sorted(set(lazy)))}): "
                        f"give their sizes, so that every parameter exists before the workers "
                        f"broadcast rank 0's weights")
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise UserError(f"--model {name} has no trainable parameters")
    try:
        with torch.no_grad():
            logits = model.eval()(torch.zeros(2, *input_shape))
    except Exception as error:
        raise UserError(f"--model {name}: a batch of shape {(2, *input_shape)} raised "
                        f"{named_first_line(error)}"
                        f"{_way_out(error, FORWARD_ON_ITS_INPUT)}") from None
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (2, num_classes):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise UserError(f"--model {name}: a batch of shape {(2, *input_shape)} gave {shape}; "
                        f"expected logits of shape (2, {num_classes}), one per class")
    if "ddp" in syncs:
        _require_every_parameter_used(name, model, input_shape)
    try:
        floor = measure_floor(model, input_shape, num_classes)
    except Exception:  # noqa: BLE001 - the workers, on their devices, may well train it
        floor = None
    return ModelFacts(parameters=sum(p.numel() for p in parameters), memory_floor=floor)


def _way_out(error: Exception, way_out: str) -> str:
    """": <way_out>" where `error` is torch's for CUDA asked of a process without a
    GPU torch can use (NO_CUDA_HERE); else empty."""
    return f": {way_out}" if any(phrase in str(error) for phrase in NO_CUDA_HERE) else ""


def _require_every_parameter_used(name: str, model: nn.Module,
                                  input_shape: tuple[int, ...]) -> None:
    """torch's DistributedDataParallel (`--sync ddp`) waits for the gradient of every
    parameter: one that the loss does not reach fails the step on every worker
    ("Expected to have finished reduction in the prior iteration"), which no
    retry mends. The other syncs sum the gradients there are."""
    model.train()(torch.zeros(2, *input_shape)).sum().backward()
    unused = [parameter_name for parameter_name, parameter in model.named_parameters()
              if parameter.requires_grad and parameter.grad is None]
    if unused:
        shown = ", ".join(unused[:4]) + (f" and {len(unused) - 4} more" if len(unused) > 4 else "")
        raise UserError(f"--model {name}: its parameters {shown} get no gradient from the loss, "
                        f"and --sync ddp (torch's DistributedDataParallel) waits for every "
                        f"one and fails the step; choose another --sync (scratch, bucketed, "
                        f"root, sharded and delayed sum the gradients there are), or leave "
                        f"those parameters out of the model")
