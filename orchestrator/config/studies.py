"""The trials the book's seven exercises need (`--preset exercises`), drawn from a
sweep's axes: a union of small grids, one per question, not their product.

Each trial carries its part, which the answers (report/answers/) select by:
- "batch-global": 13.5's experiment, the global batch b kept as workers grow;
- "batch-lr": b per worker (global k*b) at every lr, for every k (13.5.1, 13.5.2);
  at 1 worker the first lr is left out: it is batch-global's 1-worker run; above
  1 worker the lrs below the first (the reference) too; at the largest k also
  the linear rule's k times the first lr where the axis lacks it (8 workers,
  lrs up to 0.8: 1.6), the warm-up's twin;
- "warmup": the largest global batch at the linearly scaled first lr with a warm-up
  epoch from 1 worker's lr up to k times it (Goyal et al., 2017: from the small
  batch's lr, not from zero), beside batch-lr's trial without one (13.5.2); and at
  the largest lr searched there, where the rule is likeliest to break;
- "strategies": the other sync strategies, timed (13.5.3, 13.6.3), `delayed` but;
- "delayed": two steps overlapped (13.6.3), a different optimizer: at the largest
  k for every epoch, beside batch-global's trial there (its synchronous twin),
  and `bucketed` summing over the process group as `delayed` does, timed (on
  CPUs a trial of its own, the strategies part's `bucketed` summing through
  shared memory; on GPUs that trial sums as `delayed` does and is the twin); and
  `delayed` at half the lr (first seed): on a quadratic of curvature c,
  w(t+1) = w(t) - lr c w(t-1) is stable only for lr c < 1, where synchronous
  SGD's w(t+1) = (1 - lr c) w(t) is for lr c < 2, so an lr tuned for the
  synchronous optimizer may be too large for the delayed one;
- "split": even and proportional splits beside a slowed last worker (13.6.2);
- "threads": one worker using a node's cores as threads, the best single process;
- "resnet18": 13.6's network (13.6.1), its recipe where the workers are GPUs; on
  CPUs trained briefly (RESNET_CPU_STEPS steps an epoch per worker, the timing's
  epochs, a test subset), so that its compute and sync are measured, not cited.
The first lr, batch size and strategy of the axes are the reference that the
timing parts use (the book's: b 256, lr 0.2, scratch). 13.5.4 (parallel
evaluation) and the scaling model read the trials above.

Every seed replicates the cells whose accuracies the answers compare: the
baseline and batch-global, every batch-lr cell in a pair of the linear rule
(1 worker at lr, the largest k at k*lr), the warm-up arms, `delayed` at the
book's lr; the other parts run the first seed only (their times are compared against the
spread of identical work across the whole sweep, not of their own replicas).
"""

import math
from typing import NamedTuple

# Timing needs two epochs (the second free of the first's warm-up), not the
# ten that accuracy needs.
TIMING_EPOCHS = 2
# 13.6's recipe: ResNet-18 at lr 0.1 per 256 examples per GPU, scaled linearly.
RESNET_LR = 0.1
# On CPUs: steps an epoch per worker (about 6 s each at b 256 on one core of the
# 2-core Xeon with AVX-512, more without; 2 epochs about 2 minutes of training at
# 1 worker), and test images scored.
RESNET_CPU_STEPS = 8
RESNET_CPU_TEST = 500


class PointSpec(NamedTuple):
    part: str
    num_workers: int
    batch_size: int
    batch_scaling: str
    base_lr: float
    run: dict
    """TrainConfig fields set for this trial, over those the axes give."""
    replicated: bool = False
    """Run once per seed; else with the first seed only."""


def exercise_specs(*, workers: tuple[int, ...], batch_size: int, lrs: tuple[float, ...],
                   syncs: tuple[str, ...], splits: tuple[str, ...], seeds: tuple[int, ...],
                   num_epochs: int, train_size: int, test_size: int,
                   straggler_slowdown: float, baseline_threads: int, threads_per_worker: int,
                   use_gpu: bool) -> list[PointSpec]:
    timing = {"num_epochs": min(TIMING_EPOCHS, num_epochs)}
    reference = {"sync": syncs[0], "split": "even", "straggler_slowdown": 1.0}
    specs = [PointSpec("batch-global", k, batch_size, "global", lrs[0], reference, True)
             for k in workers]
    largest = max(workers)

    def in_rule_pair(k: int, lr: float) -> bool:
        """Whether the linear rule pairs this cell with one at the other end (1 worker
        at lr, the largest k at k*lr): the pairs 13.5.2 compares, so replicated."""
        partner = lr * largest if k == 1 else lr / largest
        return largest > 1 and k in (1, largest) and any(math.isclose(partner, other)
                                                         for other in lrs)

    # At 1 worker a batch of b per worker is the global batch b: batch-global's run.
    # Above 1 worker the lrs from the first up: a k-fold batch at a smaller lr than
    # 1 worker's reference pairs with no 1-worker run in the linear rule.
    # At the largest k, also the rule's own lr k*lr0 where the axis lacks it (8
    # workers of lrs up to 0.8: 1.6), the warm-up arm's twin without warm-up.
    rule_lr = largest * lrs[0]
    largest_lrs = sorted(lrs) + ([rule_lr] if largest > 1 and not any(
        math.isclose(rule_lr, lr) for lr in lrs) else [])
    specs += [PointSpec("batch-lr", k, batch_size, "per-worker", lr, reference,
                        replicated=in_rule_pair(k, lr))
              for k in workers for lr in (largest_lrs if k == largest else sorted(lrs))
              if (k == 1 and lr != lrs[0]) or (k > 1 and lr >= lrs[0])]
    if largest > 1:
        specs.append(PointSpec("warmup", largest, batch_size, "per-worker", lrs[0],
                               {**reference, "lr": largest * lrs[0], "warmup_epochs": 1,
                                "warmup_start_lr": lrs[0]}, True))
        # And at the largest lr searched there, where the rule is likeliest to break
        # (it is k times a larger 1-worker lr): does warm-up rescue it? Replicated
        # where its twin without warm-up is (in a rule pair).
        if max(lrs) > largest * lrs[0] and not math.isclose(max(lrs), largest * lrs[0]):
            specs.append(PointSpec("warmup", largest, batch_size, "per-worker", lrs[0],
                                   {**reference, "lr": max(lrs), "warmup_epochs": 1,
                                    "warmup_start_lr": max(lrs) / largest},
                                   in_rule_pair(largest, max(lrs))))
    specs += [PointSpec("strategies", k, batch_size, "global", lrs[0],
                        {**reference, **timing, "sync": sync})
              for sync in syncs[1:] if sync != "delayed" for k in workers]
    if "delayed" in syncs and largest > 1:
        specs.append(PointSpec("delayed", largest, batch_size, "global", lrs[0],
                               {**reference, "sync": "delayed"}, True))
        # Its bucketed twin: on GPUs the strategies part's, whose sums go as delayed's do.
        if not use_gpu or "bucketed" not in syncs[1:]:
            specs.append(PointSpec("delayed", largest, batch_size, "global", lrs[0],
                                   {**reference, **timing, "sync": "bucketed",
                                    "shared_memory": False}))
        # Staleness's price: one-step-delayed SGD is stable only for about half the step
        # size of synchronous SGD (studies' docstring), so half the lr.
        specs.append(PointSpec("delayed", largest, batch_size, "global", lrs[0],
                               {**reference, "sync": "delayed", "lr": lrs[0] / 2}))
    if largest > 1:
        specs += [PointSpec("split", largest, batch_size, "global", lrs[0],
                            {**reference, **timing, "split": split,
                             "straggler_slowdown": straggler_slowdown})
                  for split in splits]
    if not use_gpu and baseline_threads > threads_per_worker:
        specs.append(PointSpec("threads", 1, batch_size, "global", lrs[0],
                               {**reference, **timing, "threads_per_worker": baseline_threads}))
    if use_gpu:
        specs += [PointSpec("resnet18", k, batch_size, "per-worker", RESNET_LR,
                            {**reference, "model": "resnet18", "lr": RESNET_LR * k})
                  for k in workers]
    else:
        # On CPUs 13.6's network is trained for real, briefly: each worker RESNET_CPU_STEPS
        # steps of b an epoch, for the timing's epochs, on a test subset. Its compute,
        # sync and speedup are measured, not cited; its accuracy is a few steps'.
        specs += [PointSpec("resnet18", k, batch_size, "per-worker", RESNET_LR,
                            {**reference, **timing, "model": "resnet18", "lr": RESNET_LR * k,
                             "train_limit": RESNET_CPU_STEPS * k * batch_size,
                             "test_limit": min(test_size, RESNET_CPU_TEST)})
                  for k in workers if RESNET_CPU_STEPS * k * batch_size <= train_size]
    # Seeds outermost, as in a grid: replicas spread over the sweep's time.
    return [spec._replace(run={**spec.run, "seed": seed}) for seed in seeds for spec in specs
            if spec.replicated or seed == seeds[0]]
