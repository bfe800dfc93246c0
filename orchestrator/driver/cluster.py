"""Attach to a Ray cluster or start an embedded one, and say what it can hold.

No address (neither `--address` nor RAY_ADDRESS): an embedded local Ray with
its dashboard on 127.0.0.1. An address: attach, after a quick reachability
check, because `ray.init` to an address that does not answer waits minutes,
with this package shipped to every node (job_env.py).
"""

import contextlib
import fcntl
import math
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.driver import job_env, shipped_code
from orchestrator.driver.placement import gpu_share, node_capacity
from orchestrator.errors import UserError
from orchestrator.records import counted

REACHABILITY_TIMEOUT_S = 5.0
LOCAL_DASHBOARD_HOST = "127.0.0.1"
DEFAULT_DASHBOARD_PORT = 8265
# Ray's token authentication: on by default for a cluster ray.init starts,
# and then the dashboard asks for the token this command prints.
AUTH_MODE_ENV_VAR = "RAY_AUTH_MODE"
TOKEN_COMMAND = "ray get-auth-token"
# Held by this package's embedded starts from choosing a dashboard port until
# the dashboard listens on it; one file per machine (the system's temp dir).
DASHBOARD_PORT_LOCK = "ray-orchestrator-dashboard-port.lock"


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this process is connected to."""

    address: str | None
    """What the user asked to attach to; None for the embedded cluster."""
    dashboard_url: str | None
    node_resources: tuple[dict[str, float], ...]
    """Total resources of each alive node."""
    token_auth: bool = False
    """Whether the cluster (and so its dashboard) asks for Ray's auth token."""
    shipped: tuple[str, ...] = ()
    """The folders and files the job ships to every node (py_modules): this package
    and the user's model and data set modules."""
    forwarded: tuple[str, ...] = ()
    """The driver's settings of the collectives set for every process of the job on an
    attached cluster (`job_env.forwarded_env`), by name."""

    @property
    def num_cpus(self) -> float:
        return sum(node.get("CPU", 0.0) for node in self.node_resources)

    @property
    def num_gpus(self) -> float:
        return sum(node.get("GPU", 0.0) for node in self.node_resources)

    @property
    def dashboard_hint(self) -> str:
        """The line that tells a person where the dashboard is and how to get in."""
        hint = f" (token: run `{TOKEN_COMMAND}`)" if self.token_auth else ""
        return f"Ray dashboard: {self.dashboard_url}{hint}"

    def describe(self) -> str:
        where = f"Ray cluster at {self.address}" if self.address else "embedded local Ray"
        return (f"{where}: {counted(len(self.node_resources), 'node')}, "
                f"{counted(self.num_cpus, 'CPU')}, {counted(self.num_gpus, 'GPU')}")

    def max_workers(self, resources_per_worker: dict[str, float]) -> int:
        """How many such workers fit at once: each must fit on one node."""
        return sum(self.node_capacities(resources_per_worker))

    def node_capacities(self, resources_per_worker: dict[str, float]) -> list[int]:
        """How many such workers each node holds (`placement.node_capacity`)."""
        return [node_capacity(node, resources_per_worker)
                for node in self.node_resources] or [0]

    def require_room(self, num_workers: int, resources_per_worker: dict[str, float],
                     what: str = "the run") -> None:
        """A clear error when `num_workers` such workers can never run at once."""
        capacity = self.max_workers(resources_per_worker)
        if num_workers > capacity:
            raise UserError(
                f"{what} needs {counted(num_workers, 'worker')} of "
                f"{resources_text(resources_per_worker)} each, but the "
                f"{self.describe()} can hold at most {counted(capacity, 'such worker')}; "
                + ways_out(resources_per_worker, num_workers, self))


def resources_text(resources: dict[str, float]) -> str:
    """A worker's resources as a refusal names them: {1 CPU, 1 GPU}."""
    return "{" + ", ".join(f"{amount:g} {name}" for name, amount in resources.items()) + "}"


def ways_out(resources_per_worker: dict[str, float], num_workers: int, cluster: Cluster) -> str:
    """What a user can change when workers do not fit, for the end of the refusal:
    in the resource that is short (GPUs, CPUs, or both)."""
    gpu, cpu = resources_per_worker.get("GPU", 0.0), resources_per_worker.get("CPU", 0.0)
    short_of_cpus = cpu > 0 and cluster.max_workers({"CPU": cpu}) < num_workers
    cpu_ways = ("give fewer --workers"
                + (" or --threads-per-worker" if cpu > 1 else "")
                # A GPU worker's CPU runs its Python and launches its kernels: a node
                # may declare more logical CPUs than cores for them; CPU workers'
                # timings would crowd each other.
                + (", or start the GPU nodes with more logical CPUs (`ray start "
                   "--num-cpus N`)" if gpu > 0 else "")
                + ", or attach to a cluster with more CPUs (--address)")
    # An attached cluster's autoscaler may start GPU nodes on demand (scale_up.py).
    scale_up = (["--wait-for-nodes S where its autoscaler starts GPU nodes on demand"]
                if cluster.address else [])
    if gpu > 0 and cluster.num_gpus == 0:
        ways = (["--use-gpu no (CPU workers)"] if not short_of_cpus else []) + scale_up
        return ("this cluster has no GPU up: " + ("give " + ", or ".join(ways) + ", or "
                                                  if ways else "")
                + "attach to a cluster with GPUs (--address)")
    if gpu > 0 and cluster.max_workers({"GPU": gpu}) < num_workers:
        # n workers to a GPU, each reserving 1/n of it, on the whole GPUs there are.
        num_gpus = cluster.max_workers({"GPU": 1.0})
        share = gpu_share(math.ceil(num_workers / num_gpus)) if num_gpus >= 1 else 0.5
        ways = (f"to put {counted(num_workers, 'worker')} on {counted(num_gpus, 'GPU')} give "
                f"--gpus-per-worker {share:g} (workers share a GPU over gloo: accuracies to "
                f"compare, no speedup)")
        if short_of_cpus:
            return (f"{ways}; and {counted(num_workers, 'worker')} need "
                    f"{counted(num_workers * cpu, 'CPU')}, this cluster has "
                    f"{cluster.num_cpus:g}: {cpu_ways}")
        return ", or ".join([ways, "--use-gpu no (CPU workers)", *scale_up,
                             "attach to a cluster with more GPUs (--address)"])
    if gpu > 0 and not short_of_cpus:  # each enough alone, not on the same nodes
        held = cluster.max_workers(resources_per_worker)
        return (f"each worker needs {counted(cpu, 'CPU')} and {counted(gpu, 'GPU')} on one "
                f"node, and the "
                f"GPU nodes' CPUs hold {counted(held, 'such worker')}: {cpu_ways}")
    if short_of_cpus and gpu > 0:
        room = cluster.max_workers({"CPU": cpu})
        # Enough in all, not on whole nodes: the room there is.
        where = (f", room for {counted(room, 'such worker')}"
                 if num_workers * cpu <= cluster.num_cpus else "")
        # A CPU-only head's CPUs hold no GPU worker.
        gpu_nodes_cpus = sum(node.get("CPU", 0.0) for node in cluster.node_resources
                             if node_capacity(node, {"GPU": gpu}) > 0)
        if gpu_nodes_cpus < cluster.num_cpus:
            where += f", {gpu_nodes_cpus:g} of them on the GPU nodes"
        return (f"{counted(num_workers, 'worker')} need {counted(num_workers * cpu, 'CPU')} "
                f"({cpu:g} each), this cluster has {cluster.num_cpus:g}{where}: {cpu_ways}")
    return cpu_ways


def requested_address(address: str | None) -> str | None:
    """The address to attach to: the argument, else RAY_ADDRESS, else None (embedded)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def check_dashboard_host(host: str) -> None:
    """An embedded Ray's `--dashboard-host` must be an address this machine can
    listen on: tried with a socket bound to a free port of it and closed at once
    (else ray.init fails after its start, in a traceback)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind(address)
    except (OSError, UnicodeError) as error:  # socket.gaierror is an OSError
        raise UserError(f"--dashboard-host {host}: not an address this machine can listen on "
                        f"({error}); give {LOCAL_DASHBOARD_HOST} (the default), 0.0.0.0 for "
                        f"every interface, or one of this machine's addresses") from None


def check_reachable(address: str, timeout_s: float = REACHABILITY_TIMEOUT_S) -> None:
    """Fail within seconds if nothing listens at a host:port address.

    `auto` and `local` name the cluster started on this machine; ray.init
    itself fails fast when there is none, so they are left to it.
    """
    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UserError(f"cluster address {address!r} is not host:port (or auto)")
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as error:
        raise UserError(
            f"no Ray cluster answers at {address} ({error}); start one with "
            f"`ray start --head` or leave out --address/RAY_ADDRESS for an embedded one")


def connect(address: str | None, *, dashboard_host: str = LOCAL_DASHBOARD_HOST,
            num_cpus: int | None = None, user_code: tuple[Path, ...] = ()) -> Cluster:
    """Attach to `address`, or start an embedded Ray when it is None. `user_code`:
    the user's modules for an attached cluster's nodes (an embedded Ray's workers
    import them from this folder, on their sys.path as the driver's)."""
    # Imports Ray and Ray Train (seconds): only once the input has passed, not
    # with this module, which the checks use.
    import ray
    from ray.exceptions import RuntimeEnvSetupError

    from orchestrator import ray_fastpath
    shipped, forwarded = (), ()
    if address is None:
        context = _start_embedded(dashboard_host, num_cpus)
    else:
        check_reachable(address)
        # Reaches every process of this job on every node: Tune's trials,
        # Train's controllers and workers.
        runtime_env = job_env.attached_runtime_env(
            {**job_env.forwarded_env(), **ray_fastpath.job_env_vars(embedded=False)}, user_code)
        # Before ray.init, which replaces the folders with their packages' URIs.
        shipped = tuple(runtime_env.get("py_modules", ()))
        forwarded = tuple(name for name in job_env.forwarded_env()
                          if name in runtime_env["env_vars"])
        try:
            context = ray.init(address=address, runtime_env=runtime_env)
        except ConnectionError as error:
            hint = ""
            if not os.environ.get(AUTH_MODE_ENV_VAR):
                # Ray sends its token only to a cluster it found by itself
                # (`auto`), never to an address it was given, unless told to.
                hint = ("; if the cluster uses token authentication (Ray's default), set "
                        "RAY_AUTH_MODE=token with its token in ~/.ray/auth_token or RAY_AUTH_TOKEN")
            raise UserError(f"cannot attach to the Ray cluster at {address}: {error}{hint}")
        except RuntimeEnvSetupError as error:
            # Ray zips each folder shipped into one package, refused from 512 MiB on:
            # a --model or --dataset package that holds its data.
            too_big = next((line for line in str(error).splitlines()
                            if "exceeds the maximum size" in line), None)
            if too_big is None:
                raise
            raise UserError(f"cannot ship the job's code to the cluster's nodes: "
                            f"{too_big.split('. To exclude')[0]}; keep large files out of the "
                            f"folder of a --model or --dataset package (or list them in its "
                            f".gitignore or .rayignore)")
        shipped_code.require_shipped_code_on_every_node(shipped)
    dashboard = context.dashboard_url
    return Cluster(
        address=address,
        dashboard_url=f"http://{dashboard}" if dashboard else None,
        node_resources=alive_node_resources(),
        # Ray sets it for a cluster it starts, unless the user chose.
        token_auth=os.environ.get(AUTH_MODE_ENV_VAR, "").lower() == "token",
        shipped=shipped, forwarded=forwarded)


def alive_node_resources() -> tuple[dict[str, float], ...]:
    """The total resources of each node alive now, in the cluster this process is connected to."""
    import ray
    return tuple(node["Resources"] for node in ray.nodes() if node["Alive"])


def _start_embedded(dashboard_host: str, num_cpus: int | None):
    """Start a local Ray whose processes know which dashboard is theirs.

    Ray Train's placement-group cleaner asks the State API, every second,
    whether the Train controller is alive. Unless told otherwise, Ray finds
    the State API through /tmp/ray/ray_current_cluster, which names the last
    cluster `ray start` made on this machine, not this one. When that cluster
    is gone, every fit waits 12 s for a timeout at the end; were it alive, it
    would answer "no such actor" and the cleaner would remove the placement
    group of healthy workers. So the dashboard's port is chosen here and
    every process of this job is told it (RAY_API_SERVER_ADDRESS).

    A port free when probed is bound by the dashboard seconds later, and two
    of these starts at once on one machine (a sweep and a test run, two
    users' sweeps) probed the same port and one failed ("Failed to find a
    valid port for dashboard"). Ray cannot retry another port for us: a
    failed ray.init leaves its GCS running and unreachable to ray.shutdown.
    So the probe and the dashboard's bind happen under one lock per machine
    (ray.init returns once the dashboard listens).
    """
    import ray

    from orchestrator import ray_fastpath  # see connect
    with dashboard_port_lock():
        dashboard_port = free_local_port(preferred=DEFAULT_DASHBOARD_PORT)
        env_vars = {"RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dashboard_port}",
                    **ray_fastpath.job_env_vars(embedded=True)}
        # Loopback only by default: the dashboard can submit jobs, which run code.
        return ray.init(address="local", include_dashboard=True, dashboard_host=dashboard_host,
                        dashboard_port=dashboard_port, num_cpus=num_cpus,
                        runtime_env={"env_vars": env_vars},
                        **ray_fastpath.embedded_init_kwargs(num_cpus))


@contextlib.contextmanager
def dashboard_port_lock():
    """This machine's lock on choosing a dashboard port (flock: released when
    its holder exits, however). Without a lock file it can open (another
    user's, in a sticky /tmp), it goes on unlocked, as before it existed."""
    path = Path(tempfile.gettempdir()) / DASHBOARD_PORT_LOCK
    descriptor = None
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # flock needs no write access
        with contextlib.suppress(OSError):
            descriptor = os.open(path, flags, 0o644)
            break
    if descriptor is None:
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def free_local_port(preferred: int | None = None) -> int:
    """The first port from `preferred` up that nothing on this machine holds,
    else (or with no `preferred`) one the kernel picks.

    A kernel-picked port comes from the ephemeral range (32768 and up here),
    where Ray's own processes bind theirs: one picked before a Ray starts can
    be taken by one of them before the service it was meant for binds it (a
    test run once failed that way, the dashboard unable to bind). Counting up
    from a port below that range stays clear of them.
    """
    candidates = range(preferred, min(preferred + 100, 65536)) if preferred else ()
    for port in (*candidates, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError("no free local port")
