"""`train.py --check-equivalence`: do k workers train this model as one device does?

Data parallelism is exact when the k workers' summed gradients are the one
device's gradient of the same global batch. That holds for any model whose
forward pass treats examples independently, and fails for layers that look
at the batch: BatchNorm normalises each worker's shard by the shard's own
statistics (unless synchronised), Dropout draws each worker's masks from its
own generator. The check runs the user's model for a few steps on k workers
and on one device, with the same global batch and the same initial weights,
in fp64 (so that a summation order cannot pass for a difference), and compares
every parameter and buffer; the layers that differ are named.

The runs are real Ray Train trials (trial.py) of the same loop as training,
with the run's sync strategy, split and options; only the precision, the
layout and the length are the check's own.
"""

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from orchestrator.config.options import TrainConfig
from orchestrator.driver.failures import EQUIVALENCE, failure_text
from orchestrator.records import counted

STEPS = 4
# A parameter agrees when the two runs' values are closer than this fraction of
# how far one device's moved it from the initial weights over the steps: fp64
# round-off of the sums' different order is about 1e-15 of it, a shard's
# BatchNorm statistics 1e-3 or more.
TOLERANCE = {"fp64": 1e-9, "fp32": 1e-4}
# Layers whose training output depends on the other examples of the batch, or
# on a random generator each worker holds apart.
BATCH_DEPENDENT = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd,
                   nn.AlphaDropout)


def check_config(config: TrainConfig, precision: str = "fp64") -> TrainConfig:
    """The run shortened to `STEPS` steps of its global batch, one epoch, in
    `precision`, in NCHW (no layout timing), no failures retried, a small test set,
    nothing profiled;
    on GPUs fp32's convolutions in IEEE fp32, not TF32, whose rounding (a 10-bit
    mantissa) in the two runs' differently shaped batches may exceed fp32's tolerance."""
    steps = min(STEPS, config.num_train_examples // config.global_batch_size)
    return dataclasses.replace(
        config, precision=precision, memory_format="nchw", tf32=not config.use_gpu,
        num_epochs=1, warmup_epochs=0, train_limit=steps * config.global_batch_size,
        evals_per_epoch=1, target_acc=None,
        test_limit=min(config.num_test_examples, max(config.num_workers, 100)),
        max_failures=0, profile_steps=0)


def require_room(config: TrainConfig, cluster, gpu_memory_bytes: float | None) -> None:
    """The check's one device holds the whole global batch: refused in one line,
    before either run starts, where that step's memory floor cannot fit
    (model_check.require_room_in_memory; its floor in fp64 is counted at fp32's
    bytes, so that the fp32 run it falls back to is held to it as well)."""
    from orchestrator.driver.model_check import require_room_in_memory
    require_room_in_memory(
        [dataclasses.replace(check_config(config), num_workers=1)], cluster, gpu_memory_bytes,
        run="--check-equivalence runs the global batch on one device: ",
        ways="a smaller --batch-size checks the same model (its layers, not the batch size, "
             "make it agree or not)")


class Diverged(Exception):
    """A run of the check diverged: its weights, not finite, compare to nothing."""


@dataclass(frozen=True)
class Verdict:
    agree: bool
    steps: int
    precision: str
    largest: float
    """The largest relative difference of any parameter (in its update's units)."""
    largest_in: str
    differing: tuple[str, ...]
    """The layers (module names) with a parameter or buffer that differs."""
    batch_layers: tuple[str, ...]
    """Of the model's layers, those that look at the batch (BATCH_DEPENDENT, not
    synchronised): the usual cause."""
    num_tensors: int
    num_differing: int
    micro_batches: int = 1
    """--accumulation-steps: each shard's, and the one device's batch, in that many parts."""

    def line(self, num_workers: int) -> str:
        head = (f"{num_workers} workers and 1 device after {counted(self.steps, 'step')} of the "
                f"same global batch ({self.precision}): ")
        if self.agree:
            return (f"equivalence: agree. {head}every parameter and buffer the same, the "
                    f"largest difference {self.largest:.1e} of how far the steps moved it "
                    f"(in {self.largest_in}; tolerance {TOLERANCE[self.precision]:g})")
        named = ", ".join(self.differing[:8]) + (
            f" and {len(self.differing) - 8} more" if len(self.differing) > 8 else "")
        cause = ""
        if self.batch_layers:
            shown = ", ".join(self.batch_layers[:8]) + (
                f" and {len(self.batch_layers) - 8} more" if len(self.batch_layers) > 8 else "")
            batchnorm = (
                f"BatchNorm normalises by each micro-batch of --accumulation-steps "
                f"{self.micro_batches}, synchronised or not: --accumulation-steps 1 with "
                f"--sync-batchnorm on GPU workers"
                if self.micro_batches > 1 else
                "BatchNorm normalises by each worker's shard: --sync-batchnorm on GPU workers")
            cause = (f"; the cause is likely its layers that look at the batch: {shown} "
                     f"({batchnorm}, or GroupNorm/LayerNorm; Dropout draws each worker's "
                     f"masks)")
        return (f"equivalence: differ: {named}. {head}{self.num_differing} of "
                f"{self.num_tensors} tensors differ, the largest by {self.largest:.2g} of "
                f"how far the steps moved it (in {self.largest_in}){cause}")


def compare(model: nn.Module, initial: dict, one_device: dict, many: dict, *,
            steps: int, precision: str, sync_batchnorm: bool = False,
            micro_batches: int = 1) -> Verdict:
    """The state dicts after the steps on one device and on k workers, against the
    `initial` weights of `model` (built from the run's seed)."""
    differing, largest, largest_in, num_differing = {}, 0.0, "", 0
    names = list(one_device)
    for name in names:
        reference, other = one_device[name].double(), many[name].double()
        if reference.shape != other.shape:
            raise ValueError(f"{name}: shapes {tuple(reference.shape)} and {tuple(other.shape)}")
        moved = (reference - initial[name].double()).abs().max().item() if name in initial \
            else reference.abs().max().item()
        scale = moved if moved > 0 else max(reference.abs().max().item(), 1.0)
        difference = (reference - other).abs().max().item() / scale
        if not math.isfinite(difference):
            difference = math.inf
        if difference > largest or not largest_in:
            largest, largest_in = difference, name
        if difference > TOLERANCE[precision]:
            num_differing += 1
            differing.setdefault(name.rpartition(".")[0] or name, None)
    modules = dict(model.named_modules())
    batch_layers = tuple(
        _layer(name, module) for name, module in modules.items()
        if isinstance(module, BATCH_DEPENDENT) and not (
            sync_batchnorm and isinstance(module, nn.modules.batchnorm._BatchNorm)))
    return Verdict(agree=not differing, steps=steps, precision=precision, largest=largest,
                   largest_in=largest_in,
                   differing=tuple(_layer(name, modules.get(name)) for name in differing),
                   batch_layers=batch_layers, num_tensors=len(names),
                   num_differing=num_differing, micro_batches=micro_batches)


def _layer(name: str, module: nn.Module | None) -> str:
    """A layer as the check names it: "layer1.0.bn1 (BatchNorm2d)"."""
    return f"{name} ({type(module).__name__})" if module is not None else name


def initial_state(config: TrainConfig) -> tuple[nn.Module, dict]:
    """The model as every worker starts it (rank 0's, from the seed), in the check's dtype."""
    from orchestrator.training.recipe import model_of
    from orchestrator.training.step import PARAMETER_DTYPES
    model = model_of(config).to(PARAMETER_DTYPES[config.precision])
    return model, {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def compare_runs(config: TrainConfig, one_device_state: dict, many_state: dict) -> Verdict:
    model, initial = initial_state(config)
    # Synchronised BatchNorm sees a micro-batch of every shard under --accumulation-steps,
    # a contiguous part of the batch on one device: batch-dependent again.
    return compare(model, initial, one_device_state, many_state,
                   steps=config.steps_per_epoch, precision=config.precision,
                   sync_batchnorm=config.sync_batchnorm and config.accumulation_steps == 1,
                   micro_batches=config.accumulation_steps)


def run(config: TrainConfig, data_ref, *, name: str, storage_path: str | None) -> Verdict:
    """The two runs on the cluster (k workers, then one), compared: in fp64, or in
    fp32 where the model does not run in fp64."""
    from ray.train import TrainingFailedError

    from orchestrator.driver.trial import run_trial
    from orchestrator.training.checkpoint import load_checkpoint

    def final_state(check: TrainConfig, label: str) -> dict:
        result = run_trial(check, data_ref, name=f"{name}-{label}", storage_path=storage_path)
        with result.checkpoint.as_directory() as folder:
            state, _, _ = load_checkpoint(Path(folder))
        if state is None:
            raise Diverged(f"the {label} run diverged at lr {check.lr:g}: check at a smaller "
                           f"--lr")
        return state["model"]

    for precision in ("fp64", "fp32"):
        check = check_config(config, precision)
        print(f"checking: {check.num_workers} workers, then 1 device, "
              f"{counted(check.steps_per_epoch, 'step')} of global batch "
              f"{check.global_batch_size} in {precision}, sync "
              f"{check.sync}, split {check.split}")
        try:
            many = final_state(check, f"{check.num_workers}w")
            one = final_state(dataclasses.replace(check, num_workers=1), "1w")
        except TrainingFailedError as error:
            if precision == "fp32":
                raise
            print(f"the model did not train in fp64 ({failure_text(error, EQUIVALENCE)}); "
                  f"checking in fp32, with a looser tolerance")
            continue
        return compare_runs(check, one, many)
    raise AssertionError("unreachable")
