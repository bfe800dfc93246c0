"""Every option of a run, declared once, and the one place it is validated.

`TrainConfig` is one data-parallel run (a sweep's axes over it: grid.py). Each
field carries its default, a one-line doc and (where the name alone is not it)
its command-line flag: orchestrator/config/cli.py generates both scripts'
options from these fields. A config is checked when it is built, before
anything touches a cluster.
"""

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.config.dataset import FASHION_MNIST, DataFacts, even_shares, parse_shape
from orchestrator.config.references import REFERENCE
from orchestrator.errors import UserError
from orchestrator.records import counted

Model = Literal["lenet", "resnet18"]
Sync = Literal["scratch", "bucketed", "ddp", "sharded", "root", "delayed"]
Split = Literal["even", "proportional"]
Precision = Literal["fp32", "bf16", "fp16", "fp64"]
MemoryFormat = Literal["auto", "nchw", "channels-last"]
CudaGraph = Literal["auto", "on", "off"]
# The precisions whose forward pass runs under autocast in a 16-bit float (the weights,
# gradients and optimizer stay fp32): its activations take half of fp32's memory.
HALF_PRECISIONS = ("bf16", "fp16")
MODELS, SYNC_STRATEGIES, SPLITS, PRECISIONS = (typing.get_args(kind)
                                               for kind in (Model, Sync, Split, Precision))


def option(default, doc: str, *, flag: str | None = None, swept: bool = False,
           auto: bool = False, from_data: bool = False):
    """A config field: its default, one line of doc, and its flag when not `--<name>`.

    `swept`: set for each grid point from the sweep's axes, not an option of
    its own. `auto`: the command line also takes `auto` (its default), decided
    once the cluster is known. `from_data`: no option either, a fact of the
    `--dataset` (DataFacts) that the driver reads before anything starts.
    """
    return field(default=default, metadata={"doc": doc, "flag": flag, "swept": swept,
                                            "auto": auto, "from_data": from_data})


_FACTS = DataFacts()
# Seeds beyond 64 bits overflow torch's generators, and each epoch's shuffle is
# seeded with seed * 10007 + epoch (loop.py): 32 bits keep every one in range.
MAX_SEED = 2**32 - 1


def workers_per_gpu(share: float) -> int:
    """How many workers of `share` of a GPU each fit one GPU: floor(1 / F), F as Ray
    counts a share, to 1e-4 (1 at 1, 2 at 0.5, 3 at 0.3); Ray takes each share from
    a single GPU."""
    return math.floor(1 / round(share, 4) + 1e-9)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One data-parallel training run, as every worker sees it."""

    model: str = option("lenet", "the book's lenet (13.5) or resnet18 (13.6), or your own: "
                                 "package.module:function, called as function(num_classes=N, "
                                 "input_shape=(C, H, W)) and returning a torch.nn.Module")
    dataset: str = option(FASHION_MNIST, "fashion-mnist (the book's); a folder of "
                                         "train/<class>/ and test/<class>/ images "
                                         "(torchvision's ImageFolder layout); or your own: "
                                         "package.module:function returning (train, test), "
                                         "each (images, labels) or a Dataset of (image, label)")
    num_workers: int = option(1, "Ray Train workers, each owning one device (the book's num_gpus)",
                              swept=True)
    global_batch_size: int = option(256, "examples per optimizer step, summed over all workers",
                                    swept=True)
    accumulation_steps: int = option(
        1, "gradient accumulation: each worker's shard of a step goes through forward and "
           "backward as N micro-batches, their gradients summed on the worker before the "
           "step's one sync: the same optimizer (the global batch stays --batch-size; "
           "BatchNorm sees micro-batches) in about 1/N of the activation memory")
    lr: float = option(0.2, "SGD learning rate applied to the global batch's mean gradient",
                       swept=True)
    momentum: float = option(0.0, "SGD momentum (0: the book's plain SGD)", swept=True)
    num_epochs: int = option(10, "passes over the training set", flag="--epochs")
    sync: Sync = option("scratch", "gradient sync: scratch (the book's per-tensor allreduce), "
                                   "bucketed (a few flat buffers), ddp (overlapped with backward), "
                                   "sharded (each worker sums and updates 1/k: ZeRO-1), "
                                   "root (the book's allreduce through worker 0), delayed "
                                   "(each step's sum overlaps the next step, applied one "
                                   "step late: 13.6.3)",
                        swept=True)
    split: Split = option("even", "how each global batch is divided: even, or proportional to "
                                  "each worker's measured speed (13.6, exercise 2)", swept=True)
    split_interval_steps: int = option(0, "with --split proportional, re-set the shares every "
                                          "N steps; 0: at each epoch boundary")
    straggler_slowdown: float = option(1.0, "the last of several workers emulates a device this "
                                            "many times slower: after its forward and backward "
                                            "it stays busy (on a CPU; beside a GPU it waits) "
                                            "that much longer (13.6, exercise 2)")
    pin_cores: bool = option(False, "pin each CPU worker process to its own core(s), chosen by "
                                    "its local rank (refused for GPU workers)")
    seed: int = option(0, "seeds the initial weights (on rank 0) and the per-epoch shuffle",
                       swept=True)
    train_limit: int | None = option(None, "train on the first N training images only "
                                           "(quick runs)")
    test_limit: int | None = option(None, "score the first N test images only")
    threads_per_worker: int = option(1, "torch threads per worker, and the CPUs Ray reserves "
                                        "for it (a sweep whose trials hold whole nodes of "
                                        "their own reserves the nodes' CPUs)")
    use_gpu: bool = option(False, "each worker owns a GPU (NCCL) instead of a CPU slot (gloo); "
                                  "auto: when the cluster has GPUs", auto=True)
    gpus_per_worker: float = option(
        1.0, "with GPU workers: the share of a GPU each reserves (Ray's fractional GPUs), "
             "0 < F <= 1; at 0.5 or less Ray puts workers together on a GPU and they sum over "
             "gloo, not NCCL (two NCCL ranks cannot share a device): accuracies to compare, "
             "no speedup to read")
    sync_batchnorm: bool = option(False, "synchronise BatchNorm statistics across workers "
                                         "(GPU workers only)")
    warmup_epochs: int = option(0, "linear learning-rate warm-up epochs (Goyal et al., 2017)")
    warmup_start_lr: float = option(0.0, "the lr the warm-up starts from, rising linearly to "
                                         "--lr by its last step; 0: from zero. Goyal et al. "
                                         "(2017) start a k-fold batch's warm-up at the small "
                                         "batch's lr, --lr / k")
    bucket_cap_mb: float = option(25.0, "size cap of one gradient bucket for bucketed and ddp")
    shared_memory: bool = option(True, "CPU workers on one node sum scratch and bucketed "
                                       "gradients through its shared memory, not gloo's sockets")
    precision: Precision = option("fp32", "fp32; bf16: the forward pass under bfloat16 autocast "
                                          "(loss, weights, gradients and optimizer stay fp32); "
                                          "fp16: under float16 autocast, with a dynamic loss "
                                          "scale (a step whose gradients overflow is skipped "
                                          "and the scale halved): for GPUs without bfloat16 "
                                          "(T4, V100); fp64: all in double precision",
                                  swept=True)
    tf32: bool = option(True, "on GPUs, fp32 convolutions and recurrent layers run in "
                              "TensorFloat-32 on tensor cores (PyTorch's default: a 10-bit "
                              "mantissa); matrix products stay IEEE fp32 either way")
    memory_format: MemoryFormat = option(
        "auto", "layout of the model and its inputs; auto: the faster of nchw and channels-last, "
                "timed on the workers' devices at the run's start (a few steps each)")
    cuda_graph: CudaGraph = option(
        "auto", "auto: on a GPU with one worker, the book's models' training step is "
                "captured once as a CUDA graph and replayed (training/graphed.py; on an H200 "
                "LeNet's step 3.8x, ResNet-18's 2.3x in bf16), except in a sweep that times "
                "it against several workers, whose steps run eagerly; on: your own model's "
                "too, and in such a sweep; off: eager")
    max_failures: int = option(2, "worker-group restarts from the last checkpoint before the "
                                  "run is marked failed")
    collective_timeout: int = option(
        1800, "seconds a rank waits in a collective, or for the others to join the process "
              "group, before its run fails (Ray Train's default: 1800): lower, a stopped rank "
              "or a network between nodes that does not carry the collectives "
              "(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) shows sooner; keep it above the most a "
              "rank works alone between two collectives (its first steps, which time layouts "
              "or capture a CUDA graph, among them); a worker-group restart waits it again")
    target_acc: float | None = option(None, "record when test accuracy first reaches this "
                                            "(epochs, training and wall seconds to it)")
    evals_per_epoch: int = option(1, "evaluate test accuracy this many times per epoch, so a "
                                     "target is timed within 1/N of an epoch")
    profile_steps: int = option(
        0, "profile N steps of the first epoch on every worker with torch.profiler (after "
           "its warm-up steps, before its first evaluation): the top ops a step in "
           "profile.csv and report.md, and a Chrome trace a worker in the run's folder "
           "(Perfetto, TensorBoard); 0: off")
    train_size: int = option(_FACTS.train_size, "training examples in the data set",
                             from_data=True)
    test_size: int = option(_FACTS.test_size, "test examples in the data set", from_data=True)
    input_shape: tuple[int, ...] = option(_FACTS.input_shape, "one image's (C, H, W)",
                                          from_data=True)
    num_classes: int = option(_FACTS.num_classes, "classes: labels are 0 to N-1",
                              from_data=True)

    def __post_init__(self):
        check_choices(self)
        if not isinstance(self.model, str) or not (self.model in MODELS
                                                   or REFERENCE.match(self.model)):
            raise UserError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}, "
                            f"or your own as package.module:function")
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise UserError(f"--dataset must name a data set, got {self.dataset!r}")
        # A tuple; a JSON list, or Tune's config's "1x28x28" (tune_experiment.py), read back.
        object.__setattr__(self, "input_shape", parse_shape(self.input_shape))
        require_int(self.num_workers, "number of workers", minimum=1)
        require_int(self.global_batch_size, "batch size", minimum=1)
        if self.global_batch_size < self.num_workers:
            raise UserError(
                f"batch size {self.global_batch_size} is smaller than the {self.num_workers} "
                f"workers: every worker needs at least one example per step"
            )
        require_int(self.accumulation_steps, "accumulation steps", minimum=1)
        smallest_share = self.global_batch_size // self.num_workers
        if self.accumulation_steps > smallest_share:
            raise UserError(
                f"--accumulation-steps {self.accumulation_steps} needs at least that many "
                f"examples in every worker's shard of a step, but batch "
                f"{self.global_batch_size} over {counted(self.num_workers, 'worker')} gives "
                f"{smallest_share} to the smallest")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"learning rate must be a finite number > 0, got {self.lr!r}")
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise UserError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if self.target_acc is not None and not (
                isinstance(self.target_acc, (int, float)) and 0 < self.target_acc <= 1):
            raise UserError(f"target accuracy must be in (0, 1], got {self.target_acc!r}")
        require_int(self.num_epochs, "epochs", minimum=1)
        require_int(self.seed, "seed", minimum=0)
        if self.seed > MAX_SEED:
            raise UserError(f"seed must be <= {MAX_SEED} (32 bits, as numpy's), got {self.seed}")
        require_int(self.threads_per_worker, "threads per worker", minimum=1)
        require_int(self.warmup_epochs, "warm-up epochs", minimum=0)
        require_int(self.profile_steps, "profiled steps", minimum=0)
        if self.warmup_epochs and not (isinstance(self.warmup_start_lr, (int, float))
                                       and 0 <= self.warmup_start_lr <= self.lr):
            raise UserError(f"the warm-up's start lr must be in [0, lr = {self.lr:g}], "
                            f"got {self.warmup_start_lr!r}")
        require_int(self.max_failures, "max failures", minimum=0)
        require_int(self.collective_timeout, "collective timeout", minimum=1)
        if self.warmup_epochs > self.num_epochs:
            raise UserError(
                f"warm-up epochs ({self.warmup_epochs}) exceed the "
                f"{counted(self.num_epochs, 'epoch')}"
            )
        if self.train_limit is not None:
            require_int(self.train_limit, "train limit", minimum=1)
            if self.train_limit > self.train_size:
                raise UserError(f"train limit {self.train_limit} is larger than the "
                                f"{self.train_size} training images")
            if self.train_limit < self.global_batch_size:
                raise UserError(
                    f"train limit {self.train_limit} is smaller than one global batch "
                    f"({self.global_batch_size}): no step could run"
                )
        elif self.train_size < self.global_batch_size:
            raise UserError(f"the global batch {self.global_batch_size} is larger than the "
                            f"{self.train_size} training images of {self.dataset}: no step "
                            f"could run (give a smaller --batch-size)")
        require_int(self.evals_per_epoch, "evaluations per epoch", minimum=1)
        if self.evals_per_epoch > self.steps_per_epoch:
            raise UserError(f"{self.evals_per_epoch} evaluations per epoch exceed the "
                            f"{counted(self.steps_per_epoch, 'step')} of an epoch")
        if self.test_limit is not None:
            require_int(self.test_limit, "test limit", minimum=1)
            if self.test_limit > self.test_size:
                raise UserError(
                    f"test limit {self.test_limit} is larger than the {self.test_size} test "
                    f"images")
        if not (isinstance(self.straggler_slowdown, (int, float))
                and math.isfinite(self.straggler_slowdown) and self.straggler_slowdown >= 1):
            raise UserError(f"straggler slowdown must be a number >= 1, got "
                            f"{self.straggler_slowdown!r}")
        if not (isinstance(self.gpus_per_worker, (int, float)) and not isinstance(
                self.gpus_per_worker, bool) and 0 < self.ray_gpu_share <= 1):
            zero = (", which Ray counts as 0 (to 1e-4)"
                    if isinstance(self.gpus_per_worker, float) and 0 < self.gpus_per_worker < 1
                    else "")
            raise UserError(f"GPUs per worker must be a share of one GPU, 0 < F <= 1, got "
                            f"{self.gpus_per_worker!r}{zero}")
        if self.gpus_per_worker != 1 and not self.use_gpu:
            raise UserError(f"--gpus-per-worker {self.gpus_per_worker:g} is for GPU workers, "
                            f"but these are CPU workers (--use-gpu no, or a cluster without "
                            f"GPUs): leave it out")
        if not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise UserError(f"bucket cap must be > 0 MB, got {self.bucket_cap_mb!r}")
        require_int(self.split_interval_steps, "split interval steps", minimum=0)
        for name in ("use_gpu", "sync_batchnorm", "shared_memory", "pin_cores", "tf32"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.sync_batchnorm and not self.use_gpu:
            raise UserError("synchronised BatchNorm needs GPU workers: torch's SyncBatchNorm "
                            "does not run on CPUs")
        if not self.tf32 and not self.use_gpu:
            raise UserError("--no-tf32 is for GPU workers: TensorFloat-32 is a GPU's "
                            "tensor cores' format, and CPUs compute fp32 in IEEE fp32 already")
        if self.sync_batchnorm and self.model == "lenet":
            raise UserError("--sync-batchnorm: the book's LeNet has no BatchNorm layer, so it "
                            "would change nothing; leave it out (ResNet-18 has BatchNorm)")

    @property
    def num_train_examples(self) -> int:
        return self.train_size if self.train_limit is None else self.train_limit

    @property
    def num_test_examples(self) -> int:
        return self.test_size if self.test_limit is None else self.test_limit

    @property
    def steps_per_epoch(self) -> int:
        # The last partial global batch is dropped so that every step of
        # every run has exactly `global_batch_size` examples, whatever k is.
        return self.num_train_examples // self.global_batch_size

    @property
    def batch_sizes_per_worker(self) -> tuple[int, ...]:
        """The even split; a proportional split starts from it."""
        return even_shares(self.global_batch_size, self.num_workers)

    @property
    def batch_size_per_worker(self) -> int:
        """The largest shard of the even split: what the busiest worker computes per step
        (a proportional split's shares are in each epoch's metrics)."""
        return -(-self.global_batch_size // self.num_workers)

    @property
    def micro_batch_size_per_worker(self) -> int:
        """The largest micro-batch of the even split's largest shard: what one forward
        and backward holds in memory (the shard itself without accumulation)."""
        return -(-self.batch_size_per_worker // self.accumulation_steps)

    @property
    def resources_per_worker(self) -> dict[str, float]:
        """What Ray reserves for one worker: its threads' CPUs, and a GPU if it owns one."""
        return {"CPU": float(self.threads_per_worker),
                **({"GPU": float(self.gpus_per_worker)} if self.use_gpu else {})}

    @property
    def ray_gpu_share(self) -> float:
        """--gpus-per-worker as Ray counts a share of a GPU: to 1e-4."""
        return round(self.gpus_per_worker, 4)

    @property
    def workers_per_gpu(self) -> int:
        """How many workers of --gpus-per-worker fit one GPU (`workers_per_gpu`). Ray
        fills a GPU with them before it starts the next (model_check's best fit)."""
        return workers_per_gpu(self.gpus_per_worker)

    @property
    def two_fit_one_gpu(self) -> bool:
        """GPU workers of which two fit one GPU (--gpus-per-worker at most 0.5); Ray
        then puts them together."""
        return self.use_gpu and self.workers_per_gpu >= 2

    @property
    def shares_gpu(self) -> bool:
        """Several GPU workers of which two fit one GPU (at most 0.5 of one each),
        which Ray puts together; above 0.5 no two fit, and each owns its GPU as at 1."""
        return self.two_fit_one_gpu and self.num_workers > 1

    @property
    def backend(self) -> str:
        """The process group's backend: NCCL when each worker owns a GPU; gloo on CPUs
        and where workers share a GPU (NCCL refuses two ranks on one device; gloo sums
        CUDA tensors)."""
        return "nccl" if self.use_gpu and not self.shares_gpu else "gloo"

    @property
    def is_book_recipe(self) -> bool:
        """13.5's own run (any number of workers): LeNet, global batch 256, lr 0.2,
        plain SGD, no warm-up, fp32; the baseline of time to accuracy."""
        return (self.model, self.dataset, self.global_batch_size, self.lr, self.momentum,
                self.warmup_epochs, self.precision) == ("lenet", FASHION_MNIST, 256, 0.2, 0.0,
                                                        0, "fp32")

    @property
    def is_book_model(self) -> bool:
        """One of the book's networks on the book's data set: what the book's
        exercises are about (the report answers them for these only)."""
        return self.model in MODELS and self.dataset == FASHION_MNIST

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def field_doc(config_class, name: str) -> str:
    return config_class.__dataclass_fields__[name].metadata["doc"]


"""Every option, by name: the flat form of a sweep, and the command line."""


def check_choices(config) -> None:
    """Every `Literal` field holds one of its choices: one line naming the first that does not."""
    for spec in dataclasses.fields(config):
        choices = typing.get_args(spec.type) if typing.get_origin(spec.type) is Literal else ()
        if choices and getattr(config, spec.name) not in choices:
            raise UserError(f"unknown {spec.name.replace('_', ' ')} {getattr(config, spec.name)!r}; "
                            f"choose one of {', '.join(choices)}")


def require_int(value, what: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise UserError(f"{what} must be >= {minimum}, got {value}")


def typed_value(value, annotation, what: str):
    """`value` checked against a field's annotation; JSON lists become tuples."""
    if typing.get_origin(annotation) is Literal:
        return value  # its choices are checked with the rest of the config
    if typing.get_origin(annotation) is tuple:
        item_type = typing.get_args(annotation)[0]
        if isinstance(value, str) and typing.get_origin(item_type) is Literal:
            # sync, split, precision: one value is a one-point axis (files written
            # before they were axes hold one)
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{what} must be a list, got {value!r}")
        return tuple(typed_value(item, item_type, what) for item in value)
    if isinstance(annotation, types.UnionType):  # `int | None`
        if value is None:
            return None
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    accepted = (int, float) if annotation is float else annotation
    if isinstance(value, bool) and annotation is not bool or not isinstance(value, accepted):
        raise UserError(f"{what} must be {annotation.__name__}, got {value!r}")
    return value
