"""What a data-parallel step costs beyond its 1-worker compute, read from a sweep's
calibration (training/calibration.py): the sums' seconds on a link, Hockney's
alpha-beta model per transport's algorithm (`per_call`), fitted from the allreduce
microbenchmark (`fit_link`) or named (`INTERCONNECTS`, for the what-ifs); and the
compute's contention when k workers share a node (`contention`). The scaling model
(scaling_model.py) and the ResNet-18 what-if (resnet18_what_if.py) are built on
them. No Ray or torch here.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from orchestrator.records import ROOT_FUNNEL, SHARDED_PAIR

SHARED_MEMORY = "shared memory"  # calibration.json's name of the node's shared-memory transport


@dataclass(frozen=True)
class Link:
    name: str  # "shared memory (measured)", "gloo (measured)", "10 Gb/s Ethernet", ...
    alpha_s: float  # seconds per latency step (a ring step, a message, a barrier)
    # Bytes per second of the transport's volume: a ring's bus bandwidth; for the
    # node's shared memory the node's memory bandwidth, shared by its k workers.
    beta_bytes_per_s: float
    source: str  # where the numbers come from, short; docs/SCALING_MODEL.md in full
    # A step's first sum, timed right after a backward (calibration's "first_call"):
    # its own alpha and beta where the calibration has them, else NaN (the one regime).
    first_alpha_s: float = math.nan
    first_beta_bytes_per_s: float = math.nan


# Named interconnects for the extrapolation; derivations in docs/SCALING_MODEL.md.
INTERCONNECTS = (
    Link("10 Gb/s Ethernet", 50e-6, 0.9 * 1.25e9,
         "assumed: IEEE 802.3ae line rate 1.25e9 B/s at 90%, 50 us per ring step (TCP)"),
    Link("100 Gb/s Ethernet (RDMA)", 25e-6, 0.9 * 12.5e9,
         "assumed: line rate 12.5e9 B/s at 90%; ~50 us per 2-node call (2 steps) as in "
         "github.com/NVIDIA/nccl/issues/1244"),
    Link("NVLink, 8x H100 (NCCL)", 1e-6, 370e9,
         "ring busbw ~370 GB/s: github.com/NVIDIA/nccl-tests/issues/212; 1 us a step assumed"),
)


# The book's p2.16xlarge: 16 GPUs (8 K80 boards of two GK210s) on PCIe 3.0; a ring crosses the
# host's PCIe switches. Derivation and sources in docs/SCALING_MODEL.md.
P2_16XLARGE = Link("PCIe 3.0, p2.16xlarge (8 K80 boards, 16 GPUs)", 10e-6, 12e9,
                   "assumed: PCIe 3.0 x16 ~12 GB/s effective a direction (15.75 GB/s raw), "
                   "10 us a step")


def fit_link(transport: str, samples: list[dict]) -> Link:
    """Fit `seconds = steps(k) * alpha + volume(k) * bytes / beta` over the allreduce
    samples of `transport`, steps and volume its algorithm's (`per_call`), so alpha
    is per step at the calibration's k and its growth with k is the algorithm's.

    In two regimes, as Hockney's model is fitted: beta from the larger half of
    the sizes, where bytes set the time; alpha then from the smaller half, with
    that beta. One line through every size mixes regimes that differ on real
    links: a token-bucket-shaped link passes a message within its burst at line
    rate, and a transport changes protocol at some size (eager, rendezvous). On
    a 50 Mbit/s netns link the book's root funnel took 2n/R for 1 MB and n/R for
    16 KB, and a line through all sizes read the link 1.8x faster than it was
    (bench/notes/scaling_held_out.md).

    Robust in both: beta by least absolute *relative* deviations (iteratively
    reweighted least squares) over the large sizes, alpha the median of the small
    sizes' per-step remainders, so one slow sample (a 1 KB call of 1.15 ms among
    28 us ones) sets neither. alpha clamped at 0; a slope that is not positive
    (sizes too close to resolve it) gives an infinite beta.
    """
    own = [s for s in samples if s["transport"] == transport]
    terms = [per_call(transport, s["num_workers"]) for s in own]
    sizes = np.array([s["bytes"] for s in own], float)
    steps = np.array([steps for steps, _ in terms], float)
    volume_bytes = np.array([volume * s["bytes"] for s, (_, volume) in zip(own, terms)], float)
    seconds = np.array([s["seconds"] for s in own], float)
    large = sizes >= np.median(np.unique(sizes))
    if len(np.unique(volume_bytes[large])) < 2:  # too few sizes for two regimes
        large = np.ones(len(own), bool)
    _, s_per_byte = _least_relative_deviations(
        np.column_stack([steps[large], volume_bytes[large]]), seconds[large])
    s_per_byte = max(s_per_byte, 0.0)
    small = ~large if (~large).any() else large
    alpha_s = max(0.0, float(np.median((seconds[small] - volume_bytes[small] * s_per_byte)
                                       / steps[small])))
    workers = ", ".join(str(k) for k in sorted({s["num_workers"] for s in own}))
    return Link(f"{transport} (measured)", alpha_s,
                float(1.0 / s_per_byte) if s_per_byte > 0 else math.inf,
                f"measured at the sweep's start, {workers} workers")


def with_first_call(link: Link, transport: str, first_calls: list[dict]) -> Link:
    """`link` with its first-call regime fitted from `first_calls` where they time
    `transport` (calibrations from before they were recorded have none)."""
    if not any(sample["transport"] == transport for sample in first_calls):
        return link
    first = fit_link(transport, first_calls)
    return dataclasses.replace(link, first_alpha_s=first.alpha_s,
                               first_beta_bytes_per_s=first.beta_bytes_per_s)


def _least_relative_deviations(design: np.ndarray, seconds: np.ndarray,
                               iterations: int = 100) -> np.ndarray:
    """x minimising sum |design @ x - seconds| / seconds, by iteratively reweighted
    least squares (a median-like fit: a minority of outliers does not move it)."""
    rows, target = design / seconds[:, None], np.ones(len(seconds))
    weights = np.ones(len(seconds))
    for _ in range(iterations):
        root = np.sqrt(weights)
        x, *_ = np.linalg.lstsq(rows * root[:, None], target * root, rcond=None)
        weights = 1.0 / np.maximum(np.abs(rows @ x - target), 1e-9)
    return x


def contention(calibration: dict, num_workers: int, model: str | None = None) -> float:
    """s(k) / s(1): how much slower one worker computes while k compute at once, as
    the calibration's probe of `model` read it (`probed_model`).

    Interpolated between measured worker counts; above the largest measured, that
    one's value (contention is not extrapolated); 1.0 without a 1-worker measurement.
    """
    probed = probed_model(calibration, model)
    measured = {int(c["num_workers"]): c["seconds_per_example"]
                for c in calibration.get("compute", [])
                if sample_model(calibration, c) == probed}
    if 1 not in measured:
        return 1.0
    counts = sorted(measured)
    per_example_s = np.interp(num_workers, counts, [measured[k] for k in counts])
    return float(per_example_s / measured[1])


def probed_model(calibration: dict, model: str | None) -> str | None:
    """The model whose probe stands for `model`'s contention: its own where the
    calibration probed it, else the calibration's own model (a calibration from
    before each model was probed probed only that one)."""
    probed = {sample_model(calibration, c) for c in calibration.get("compute", [])}
    return model if model in probed else calibration.get("model")


def sample_model(calibration: dict, sample: dict) -> str | None:
    """The model a `compute` sample of the calibration probed (before 2026-11-26 a
    sample did not say: the calibration's own model)."""
    return sample.get("model", calibration.get("model"))


def comm_s(link: Link, sync: str, gradient_bytes: dict, num_workers: int) -> float:
    """Seconds of one step's collectives: per message the transport's algorithm's
    steps (each `alpha`) and bytes (`per_call`); sharded, without its pair timed
    together, a reduce-scatter and an all-gather of the flat parameters, k-1 steps
    and (k-1)/k bytes each. The per-step alpha was fitted at the calibration's k;
    its k-dependence is the algorithm's: gloo's ring 2(k-1) steps, the root funnel
    2(k-1) messages, the shared memory two barriers whatever k. Where the link has a
    first-call regime, the step's first message costs what it cost right after a
    backward, and the others what they cost back to back."""
    if num_workers == 1:
        return 0.0
    tensor_bytes = gradient_bytes["tensor_bytes"]
    # root's algorithm is its own on any link; the others' their link's transport's.
    transport = ROOT_FUNNEL if sync == ROOT_FUNNEL else link.name.removesuffix(" (measured)")
    steps, volume = per_call(transport, num_workers)
    if sync == ROOT_FUNNEL:
        sizes = tensor_bytes
    elif sync == "sharded" and SHARDED_PAIR not in link.name:
        return 2 * ((num_workers - 1) * link.alpha_s + (num_workers - 1) / num_workers
                    * sum(tensor_bytes) / link.beta_bytes_per_s)
    elif sync == "sharded":  # both collectives timed as one call: a ring allreduce's bytes
        sizes = [sum(tensor_bytes)]
    else:
        sizes = tensor_bytes if sync == "scratch" else gradient_bytes["bucket_bytes"]
    # The step's first sum as it was timed right after a backward, where it was; the
    # rest back to back.
    back_to_back = (link.alpha_s, link.beta_bytes_per_s)
    first = (back_to_back if math.isnan(link.first_alpha_s)
             else (link.first_alpha_s, link.first_beta_bytes_per_s))
    regimes = [first] + [back_to_back] * (len(sizes) - 1)
    return sum(steps * alpha_s + volume * size / beta
               for size, (alpha_s, beta) in zip(sizes, regimes))


def per_call(transport: str, num_workers: int) -> tuple[float, float]:
    """(latency steps, bytes per byte summed) of one call of `transport`'s algorithm
    on `num_workers` workers, on the worker or resource that sets its pace:

    - the book's root funnel ("<group> root"): worker 0 receives k-1 messages,
      then sends k-1, one after another: 2(k-1) steps and 2(k-1) copies of the bytes;
    - the node's shared memory (training/sync/shm_allreduce.py): two barriers per
      call whatever k; each of the k workers copies its tensor in (n read, n
      written), sums its 1/k of the k slots (n read, n/k written) and copies the
      result out (n read, n written): 5n + n/k each, (5k+1) n through the node's
      one memory bandwidth, which the k workers share;
    - gloo's (and NCCL's) allreduce, a ring: reduce-scatter then all-gather, 2(k-1)
      steps, 2(k-1)/k bytes sent per worker; sharded's pair as one call likewise
      (its all-gather is a ring; its reduce-scatter's k-1 steps are assumed).
    """
    if transport.endswith(ROOT_FUNNEL):
        return 2 * (num_workers - 1), 2 * (num_workers - 1)
    if transport == SHARED_MEMORY:
        return 2, 5 * num_workers + 1
    return 2 * (num_workers - 1), _ring_volume(num_workers)


def _ring_volume(num_workers: int) -> float:
    """Bytes each worker sends per byte of a ring allreduce: reduce-scatter, then all-gather."""
    return 2 * (num_workers - 1) / num_workers
