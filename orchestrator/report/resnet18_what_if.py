"""13.6 exercise 1 for ResNet-18 itself: its own gradient bytes, a per-step compute
time measured where this sweep trained ResNet-18 and else the book's own 13.6
figures (cited), on named links, the book's p2.16xlarge among them; and a check of
the alpha-beta model against the book's 1- and 2-GPU epochs. No torch here: the
model's size is a constant, checked against the built model by a unit test.
Sources and assumptions in docs/SCALING_MODEL.md.
"""

import math
from dataclasses import dataclass

import pandas as pd

from orchestrator.report.costs import INTERCONNECTS, P2_16XLARGE, Link, per_call

# sum(p.numel() for p in training.models.resnet18().parameters()): 13.6's variant
# (1 input channel, 10 classes, width 64), counted once with torch 2.14
# (`build_model("resnet18", seed=0)`), 76 parameter tensors; checked by
# tests/unit/test_resnet18_what_if.py.
RESNET18_PARAMETERS = 11_175_818
RESNET18_TENSORS = 76
RESNET18_GRADIENT_BYTES = 4 * RESNET18_PARAMETERS  # fp32: 44,703,272 bytes a step
# DDP's default 25 MB buckets: ResNet-18's gradients go in two allreduce calls.
BUCKET_BYTES = 25 * 1024 * 1024
FASHION_MNIST_TRAIN = 60_000
PREDICTED_GPUS = 16  # the book's p2.16xlarge


@dataclass(frozen=True)
class BookRun:
    num_gpus: int
    batch_size: int  # global: the book gives each GPU 256
    lr: float
    epoch_s: float
    test_acc: float


# d2l.ai 13.6.3 (PyTorch tab, nn.DataParallel), the rendered outputs of
# train(net, num_gpus=1, batch_size=256, lr=0.1) and train(net, num_gpus=2,
# batch_size=512, lr=0.2), 10 epochs of Fashion-MNIST each; the GPUs' model is
# not stated there (the outputs name cuda:0 and cuda:1 only).
BOOK_13_6 = (BookRun(1, 256, 0.1, 13.8, 0.90), BookRun(2, 512, 0.2, 9.5, 0.88))
BOOK_SOURCE = ("d2l.ai 13.6.3, PyTorch: 'test acc: 0.90, 13.8 sec/epoch' on 1 GPU (batch "
               "256), 'test acc: 0.88, 9.5 sec/epoch' on 2 (batch 512); GPU model not stated")
# What the book's two GPUs are assumed to be joined by (not stated in the book).
BOOK_LINK = Link("PCIe 3.0 (the book's 2 GPUs, assumed)", P2_16XLARGE.alpha_s,
                 P2_16XLARGE.beta_bytes_per_s, P2_16XLARGE.source)


@dataclass(frozen=True)
class Compute:
    label: str  # what it is: "the book's GPU (cited: ...)", "this sweep's ..., measured"
    step_s: float  # one step of `batch_per_worker` examples on one device, all but comm
    batch_per_worker: int


def book_compute() -> Compute:
    """The book's 1-GPU epoch over its steps: everything but communication, as the
    1-GPU run has none (data loading and the optimizer update included)."""
    single = BOOK_13_6[0]
    steps = math.ceil(FASHION_MNIST_TRAIN / single.batch_size)
    return Compute(f"the book's GPU, cited ({single.epoch_s} s/epoch at batch "
                   f"{single.batch_size}, d2l.ai 13.6)", single.epoch_s / steps,
                   single.batch_size)


def measured_compute(summary: pd.DataFrame, use_gpu: bool) -> Compute | None:
    """A 1-worker ResNet-18 trial of this sweep: its mean epoch (after the first) over its
    steps."""
    column = "epoch_s" if "epoch_s" in summary else "mean_epoch_time_s"  # older trials.csv
    singles = summary[(summary["model"] == "resnet18") & (summary["num_workers"] == 1)
                      & summary[column].notna()]
    if singles.empty:
        return None
    trial = singles.iloc[0]
    device = "GPU" if use_gpu else "CPU"
    step_s = trial[column] / int(trial["steps_per_epoch"])
    return Compute(f"this cluster's compute (ResNet-18 on 1 {device}, measured: "
                   f"{step_s:.3g} s a step of {int(trial['global_batch_size'])})",
                   step_s, int(trial["global_batch_size"]))


def ring_comm_s(link: Link, num_gpus: int, gradient_bytes: int = RESNET18_GRADIENT_BYTES
                ) -> float:
    """One step's ring allreduce of the gradients in DDP's 25 MB buckets (NCCL, DDP)."""
    if num_gpus == 1:
        return 0.0
    steps, volume = per_call("ring", num_gpus)
    calls = math.ceil(gradient_bytes / BUCKET_BYTES)
    return calls * steps * link.alpha_s + volume * gradient_bytes / link.beta_bytes_per_s


def data_parallel_comm_s(link: Link, num_gpus: int,
                         gradient_bytes: int = RESNET18_GRADIENT_BYTES) -> float:
    """One step's bytes of the book's nn.DataParallel: every forward replicates the
    module from GPU 0 (`torch.nn.parallel.comm.broadcast_coalesced`, NCCL's broadcast)
    and the backward reduces the replicas' gradients onto GPU 0 (`reduce_add_coalesced`,
    which calls `nccl.reduce`). Both are pipelined chains in NCCL: each link carries
    about the bytes once, after k-1 latency steps; not k-1 copies through GPU 0's link."""
    if num_gpus == 1:
        return 0.0
    return 2 * ((num_gpus - 1) * link.alpha_s + gradient_bytes / link.beta_bytes_per_s)


def data_parallel_overhead_s(num_gpus: int) -> float:
    """nn.DataParallel's own cost a step beyond compute and bytes, its one process's:
    re-copying the module onto each replica, scattering the batch and gathering the
    outputs through GPU 0, and the replicas' threads under one interpreter lock.
    Fitted to the one figure there is, the book's 2-GPU epoch (what its bytes leave
    unexplained), and assumed to grow with the replicas beyond GPU 0, (k-1): a
    what-if, tested at no other k."""
    two = BOOK_13_6[1]
    steps = math.ceil(FASHION_MNIST_TRAIN / two.batch_size)
    per_replica = (two.epoch_s / steps - book_compute().step_s
                   - data_parallel_comm_s(BOOK_LINK, two.num_gpus))
    return max(per_replica, 0.0) * (num_gpus - 1)


# 16 GPUs as they come: two 8-GPU nodes, NVLink inside each, a network between.
NODE_GPUS = 8
NODE_LINK, NETWORK_LINK = INTERCONNECTS[2], INTERCONNECTS[1]  # NVLink; 100 Gb/s RDMA


def two_node_comm_s(num_gpus: int = PREDICTED_GPUS,
                    gradient_bytes: int = RESNET18_GRADIENT_BYTES) -> float:
    """One step's hierarchical allreduce on `num_gpus` GPUs in nodes of `NODE_GPUS`
    (NCCL's tree/ring over nodes, as a two-level sum): a reduce-scatter and an
    all-gather inside each node over NVLink (a ring of 8: 2*7 steps, 2*7/8 of the
    bytes), and between them an allreduce of the node's sums across the nodes, whose
    8 shards of 1/8 all leave through the node's one network link (assumed: one 100
    Gb/s RDMA link per node), 2(m-1)/m of the bytes for m nodes."""
    nodes = math.ceil(num_gpus / NODE_GPUS)
    calls = math.ceil(gradient_bytes / BUCKET_BYTES)
    steps, volume = per_call("ring", NODE_GPUS)
    inside = calls * steps * NODE_LINK.alpha_s + volume * gradient_bytes / NODE_LINK.beta_bytes_per_s
    if nodes < 2:
        return inside
    steps, volume = per_call("ring", nodes)
    between = (calls * steps * NETWORK_LINK.alpha_s
               + volume * gradient_bytes / NETWORK_LINK.beta_bytes_per_s)
    return inside + between


def predict_epoch_s(compute: Compute, comm_s: float, num_gpus: int,
                    whole_steps: bool = False) -> float:
    """13.6's way: each GPU keeps its batch, so an epoch takes 1/k of the steps: the
    epoch's examples over the global batch, the last, partial step counted as its
    share (a speedup stays a ratio of throughputs, as the scaling model's); with
    `whole_steps`, every step whole, as the book's data loader runs its epoch."""
    steps = FASHION_MNIST_TRAIN / (num_gpus * compute.batch_per_worker)
    return (math.ceil(steps) if whole_steps else steps) * (compute.step_s + comm_s)


def book_check() -> dict:
    """The book's 2-GPU epoch predicted from its 1-GPU one by nn.DataParallel's bytes
    alone over `BOOK_LINK`, and the error against the book's own 2-GPU figure: the
    share its one process's overhead (`data_parallel_overhead_s`) is fitted to."""
    two = BOOK_13_6[1]
    # The book's own 2-GPU epoch: its loader's 118 steps, the last one partial.
    predicted_s = predict_epoch_s(book_compute(), data_parallel_comm_s(BOOK_LINK, 2), 2,
                                  whole_steps=True)
    return {"one_gpu_epoch_s": BOOK_13_6[0].epoch_s, "two_gpu_epoch_s": two.epoch_s,
            "predicted_two_gpu_epoch_s": predicted_s,
            "error": (predicted_s - two.epoch_s) / two.epoch_s,
            "overhead_s_per_step": data_parallel_overhead_s(2)}


def sixteen_gpu_rows(summary: pd.DataFrame, use_gpu: bool) -> pd.DataFrame:
    """Per compute source and link, ResNet-18's epoch (all 60,000 training images)
    and speedup on 16 devices, each keeping its batch (13.6's way): the book's
    nn.DataParallel (its NCCL broadcast and reduce, and its one process's overhead)
    on the p2.16xlarge's PCIe, DDP's ring allreduce on each named link, and 16 GPUs
    as two 8-GPU nodes.
    `row` says what each row is; every one is a what-if unless both its compute
    and its link are the p2.16xlarge's, which none is (no K80 figure is cited)."""
    computes = [c for c in (measured_compute(summary, use_gpu), book_compute()) if c]
    rows = []
    for compute in computes:
        # The book's own program first: nn.DataParallel, every gradient through GPU 0.
        cases = [(f"{P2_16XLARGE.name}'s bandwidth, the book's nn.DataParallel (NCCL "
                  f"broadcast and reduce through GPU 0, and its one process's overhead "
                  f"fitted to the book's 2 GPUs)", data_parallel_comm_s(P2_16XLARGE, PREDICTED_GPUS),
                  data_parallel_overhead_s(PREDICTED_GPUS)),
                 *((f"{link.name}'s bandwidth, DDP's ring", ring_comm_s(link, PREDICTED_GPUS),
                    0.0) for link in (P2_16XLARGE, *INTERCONNECTS)),
                 (f"two 8-GPU nodes: {NODE_LINK.name} inside, {NETWORK_LINK.name} between, "
                  f"DDP's two-level sum", two_node_comm_s(), 0.0)]
        for where, comm_s, overhead_s in cases:
            epoch_s = predict_epoch_s(compute, comm_s + overhead_s, PREDICTED_GPUS)
            single_s = predict_epoch_s(compute, 0.0, 1)
            rows.append({"row": f"what-if: {compute.label}, {where}",
                         "gpus": PREDICTED_GPUS,
                         "global_batch_size": PREDICTED_GPUS * compute.batch_per_worker,
                         "epoch_s": epoch_s, "comm_s_per_step": comm_s,
                         "overhead_s_per_step": overhead_s,
                         "speedup": single_s / epoch_s,
                         "efficiency": single_s / epoch_s / PREDICTED_GPUS})
    return pd.DataFrame(rows)
