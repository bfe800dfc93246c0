"""Command-line plumbing shared by the scripts in experiments/.

User mistakes end as one line on stderr and exit status 2, before any
worker starts; argparse's own errors are made to follow the same rule.
"""

import argparse
import functools
import sys
from collections.abc import Callable

from orchestrator import cluster as ray_cluster
from orchestrator.errors import UserError

EXIT_USER_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit status 2)."""

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def exits_2_on_user_error(main: Callable[..., int]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USER_ERROR
    return wrapper


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--address", default=None,
                       help="Ray cluster to attach to (host:port or auto); default: "
                            "$RAY_ADDRESS, else an embedded local Ray")
    group.add_argument("--dashboard-host", default="127.0.0.1",
                       help="interface of the embedded Ray's dashboard (default loopback only)")
    group.add_argument("--storage", default=None, metavar="PATH_OR_URI",
                       help="where Ray keeps checkpoints and results; a multi-node cluster "
                            "needs a path every node sees (NFS) or a bucket URI")
    group.add_argument("--max-failures", type=int, default=2,
                       help="worker-group restarts allowed per run before it is marked failed")


def add_training_args(parser: argparse.ArgumentParser) -> None:
    """Options of one run that are not swept: the model and how it trains."""
    group = parser.add_argument_group("training")
    group.add_argument("--model", default="lenet", help="lenet (13.5) or resnet18 (13.6)")
    group.add_argument("--sync", default="scratch",
                       help="gradient sync: scratch (per-tensor allreduce), bucketed, ddp")
    group.add_argument("--epochs", type=int, default=10)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--use-gpu", choices=("auto", "yes", "no"), default="auto",
                       help="each worker owns a GPU (auto: when the cluster has GPUs)")
    group.add_argument("--threads-per-worker", type=int, default=1,
                       help="torch threads per worker, and CPUs reserved for it")
    group.add_argument("--sync-batchnorm", action="store_true",
                       help="synchronise BatchNorm statistics across workers")
    group.add_argument("--warmup-epochs", type=int, default=0,
                       help="linear learning-rate warm-up epochs")
    group.add_argument("--bucket-cap-mb", type=float, default=25.0,
                       help="gradient bucket size for bucketed and ddp")
    group.add_argument("--no-shared-memory", dest="shared_memory", action="store_false",
                       help="CPU workers on one node sum gradients over gloo's sockets, not "
                            "through the node's shared memory (scratch and bucketed)")
    group.add_argument("--precision", default="fp32",
                       help="fp32; bf16: the forward pass under bfloat16 autocast (loss, weights, "
                            "gradients and optimizer stay fp32); fp64: all in double precision")
    group.add_argument("--channels-last", action="store_true",
                       help="model and inputs in channels-last memory format (faster on GPUs)")
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", default=None,
                      help="folder with the four Fashion-MNIST files (default: "
                           "$FASHION_MNIST_DIR, Debian's package, torchvision's download)")
    data.add_argument("--train-limit", type=int, default=None,
                      help="train on the first N images only (quick runs)")
    data.add_argument("--test-limit", type=int, default=None,
                      help="test on the first N images only")


def resolve_use_gpu(choice: str, num_gpus: float) -> bool:
    if choice == "auto":
        return num_gpus >= 1
    return choice == "yes"


def connect_and_describe(args: argparse.Namespace) -> ray_cluster.Cluster:
    """Attach to `--address` / RAY_ADDRESS or start an embedded Ray, and say which."""
    cluster = ray_cluster.connect(ray_cluster.requested_address(args.address),
                                  dashboard_host=args.dashboard_host)
    print(cluster.describe())
    if cluster.dashboard_url:
        print(f"Ray dashboard: {cluster.dashboard_url}")
    return cluster
