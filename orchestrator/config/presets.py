"""Named starting points for a sweep (`--preset`), in the flat form of a
`--config` file: `SweepConfig`'s and `TrainConfig`'s field names. The options
given beside a preset override it."""

PRESETS: dict[str, dict] = {
    # 13.5's experiment: LeNet, batch 256 and lr 0.2 kept as the workers go 1 -> 2.
    "d2l-13.5": dict(model="lenet", workers=(1, 2), batch_sizes=(256,), lrs=(0.2,),
                     batch_scaling="global", num_epochs=10),
    # 13.5's exercises 1 and 2: the batch per worker fixed (global k*b), an lr grid
    # per worker count. workers=None: 1, 2, 4, ... up to what the cluster holds.
    "scaling": dict(model="lenet", workers=None, batch_sizes=(64, 256), lrs=(0.05, 0.1, 0.2, 0.4),
                    batch_scaling="per-worker", num_epochs=5),
    # Time to accuracy (DAWNBench's figure): which workers, batch, lr and momentum reach
    # test accuracy 0.80 in the fewest training seconds, timed to a quarter epoch. The
    # target ends each trial that gets there and ASHA most that lag (never the book's
    # recipe, the baseline); momentum 0.9 first sets ASHA's bar with a fast learner.
    # About 10 minutes on 2 cores (docs/BENCHMARKS.md, end-to-end runs).
    "time-to-accuracy": dict(model="lenet", workers=None, batch_sizes=(128, 256),
                             lrs=(0.05, 0.1, 0.2), momentums=(0.9, 0.0), batch_scaling="global",
                             num_epochs=8, target_acc=0.8, evals_per_epoch=4,
                             stop_at_target=True, scheduler="asha"),
    # 13.6: ResNet-18, batch 256 per GPU, lr 0.1 on one GPU scaled linearly (0.2 on two).
    "d2l-13.6": dict(model="resnet18", workers=(1, 2), batch_sizes=(256,), lrs=(0.1,),
                     batch_scaling="per-worker", lr_scaling="linear", num_epochs=10),
    # The seven exercises of 13.5 and 13.6 answered from one sweep (studies.py lists
    # its parts): the first lr, batch and strategy are the book's, the timing parts'.
    # workers and baseline_threads None: from the cluster. 0.8: one step past 0.4,
    # the 1-worker best at the top edge of 0.1-0.4 in a recorded run. Three seeds
    # replicate the cells the answers compare. 8 epochs, not the book's 10. On
    # 2 cores 46 trials: 65 min 25 s on a 2-core AMD EPYC with AVX-512
    # (docs/examples/exercises-2core, 2026-11-27), 2.2x the 30 minutes meant;
    # the replicas of the rule's pairs are about 17 of them. Its LeNet compute
    # alone is 33-34 min of that machine's 2 cores (bench/notes/lenet_step.md).
    "exercises": dict(study="exercises", model="lenet", workers=None, batch_sizes=(256,),
                      lrs=(0.2, 0.1, 0.4, 0.8), seeds=(0, 1, 2),
                      sync=("scratch", "bucketed", "ddp", "sharded", "root", "delayed"),
                      split=("even", "proportional"), straggler_slowdown=2.0,
                      baseline_threads=None, num_epochs=8),
}
DEFAULT_PRESET = "d2l-13.5"
# `--quick`: a preset reduced to data subsets and 3 epochs (the report says so).
QUICK = dict(train_limit=12000, test_limit=2000, num_epochs=3)
# The exercises compare accuracies: plain SGD at lr 0.2 needs ~300 steps to leave
# chance accuracy, and batch 64 gives 3 quick epochs 560 (0.68 test accuracy).
# Two seeds: the fewest that show a spread; 36 trials, 10 min 37 s on the 2-core
# AMD EPYC with AVX-512 (2026-11-27, tests/data/exercises-quick-current).
QUICK_PER_PRESET = {"exercises": {**QUICK, "batch_sizes": (64,), "seeds": (0, 1)}}


def quick(preset: str) -> dict:
    return QUICK_PER_PRESET.get(preset, QUICK)
