"""A multi-node Ray cluster on one machine, for tests and benchmarks.

As root, each node is a `ray start --block` in a network namespace of its
own, with an address of the documentation range 198.51.100.0/24; a bridge in
one more namespace joins them, so nothing is added to the root namespace and
there is no route out: the nodes reach each other and nothing else. Each
node's link can be capped (`tc ... tbf`). Each node also runs in a mount
namespace of its own with its own /dev/shm (a tmpfs), as separate machines
have: workers on different nodes cannot meet in shared memory, and their
gradients cross the link. One node can get a private view of a path as well
(a tmpfs over it), to play a node that does not share a filesystem. Where
namespaces cannot be made (not root, or `ip netns add` fails),
`ray.cluster_utils.Cluster` runs the nodes on 127.0.0.1 instead, without a
rate or a private path.

As a module: `with netns_cluster(3, 1) as cluster: cluster.run_in("head", argv)`.
As a script, for a person:

    python tools/netns_cluster.py up --nodes 3 --cpus 2 --rate 100mbit
    ip netns exec d2l-head .venv/bin/python experiments/sweep.py --address 198.51.100.1:6379 ...
    python tools/netns_cluster.py status
    python tools/netns_cluster.py down
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_PREFIX = "198.51.100."  # TEST-NET-2 (RFC 5737): routed nowhere
SUBNET_BITS = 24
HEAD_PORT = 6379
DASHBOARD_PORT = 8265
BRIDGE = "br0"
NODE_LINK = "veth0"  # each node's end of its veth pair, inside the node's namespace
# tbf's bucket and queue: a burst of about 10 full-size frames, and packets
# wait at most this long before tbf drops them (TCP then backs off).
TBF_BURST = "16kb"
TBF_LATENCY = "50ms"
# Each node's object store: room for the data set (55 MB) several times over,
# without taking a share of /dev/shm from other users of the machine.
OBJECT_STORE_BYTES = 512 * 2**20
# Ray Train starts two helper actors beside a run's workers; a node of a few
# CPUs starts its worker processes together only with room for them (see
# docs/CLUSTERS.md).
TRAIN_HELPER_ACTORS = 2
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
RAY_CLI = str(Path(sys.executable).with_name("ray"))
STATE_FILE = "cluster.json"
STARTED_LINE = "Ray runtime started."  # what `ray start` prints once its node runs
SHM = "/dev/shm"  # each node's own


@dataclass
class Node:
    """One Ray node: its name ("head", "w1", ...), namespace, address and process."""

    name: str
    namespace: str | None
    ip: str
    num_cpus: int
    pid: int | None = None
    """The node's `ray start --block`: stopping it stops the node."""


@dataclass
class NetnsCluster:
    """The cluster's bookkeeping: which namespaces and processes are ours."""

    name: str
    nodes: list[Node]
    temp_dir: str
    """Ray's --temp-dir for every node: sessions, logs and ray_current_cluster
    stay out of /tmp/ray, which other clusters on this machine read."""
    rate: str | None = None
    private_path: str | None = None
    """Hidden on the private node: a path, or several joined by os.pathsep (as in PATH)."""
    private_node: str | None = None
    kind: str = "netns"
    _fallback: object = field(default=None, repr=False)
    _fallback_nodes: list = field(default_factory=list, repr=False)
    _procs: list = field(default_factory=list, repr=False)

    @property
    def bridge_namespace(self) -> str:
        return f"{self.name}-br"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of ours, the bridge's last: it goes last."""
        if self.kind != "netns":
            return []
        return [node.namespace for node in self.nodes] + [self.bridge_namespace]

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def head_address(self) -> str:
        return f"{self.head.ip}:{self._head_port}"

    @property
    def _head_port(self) -> int:
        if self._fallback is not None:
            return int(self._fallback.address.rsplit(":", 1)[1])
        return HEAD_PORT

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def env(self) -> dict[str, str]:
        """The environment of the nodes and of a driver run among them."""
        env = {**os.environ, "RAY_ADDRESS": self.head_address,
               # Ray sends its auth token to an address it was given only when told to.
               "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
        return env

    def command_in(self, node: str, argv: list[str], cwd: str | Path | None = None) -> list[str]:
        """`argv` as run in `node`'s namespaces (network, and mount for a private
        path), in `cwd` (default this process's)."""
        target = self.node(node)
        if self.kind != "netns":
            return list(argv)
        # Entering the node's own process's namespaces sees its private path too;
        # entering a mount namespace would otherwise start in its root folder.
        return ["nsenter", f"--target={target.pid}", "--net", "--mount",
                f"--wd={cwd or os.getcwd()}", "--", *argv]

    def run_in(self, node: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run `argv` in `node`'s namespaces with the cluster's environment
        (RAY_ADDRESS names the head), capturing its output as text."""
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command_in(node, argv, kwargs.get("cwd")), **kwargs)

    def kill_node(self, name: str) -> None:
        """Kill a node outright, as a machine that loses power: its `ray start`'s
        process group, then every process left in its namespace (Ray's workers
        among them), all with SIGKILL. Its namespace stays, empty, until `stop`."""
        assert self.kind == "netns", "killing one node needs namespaces"
        target = self.node(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(target.pid, signal.SIGKILL)
        _kill_all_in(target.namespace)

    def node_ids(self) -> dict[str, str]:
        """Each node's Ray node id, by node name."""
        if self._fallback is not None:
            return {node.name: ray_node.node_id
                    for node, ray_node in zip(self.nodes, self._fallback_nodes)}
        by_ip = self._alive_nodes(timeout_s=30)
        return {node.name: by_ip[node.ip] for node in self.nodes}

    def pids(self) -> set[int]:
        """Every process in the cluster's namespaces now: all of them ours."""
        return {pid for namespace in self.namespaces for pid in namespace_pids(namespace)}

    def leftovers(self, pids: set[int]) -> tuple[list[str], list[int]]:
        """What outlived the cluster: its namespaces, and which of `pids` still run."""
        namespaces = set(list_namespaces()) & set(self.namespaces)
        return sorted(namespaces), sorted(pid for pid in pids if _alive(pid))

    def _alive_nodes(self, timeout_s: float) -> dict[str, str]:
        """{node ip: Ray node id} once every node is alive, asked from the head's namespace."""
        code = ("import json, time\n"
                "import ray\n"
                f"deadline = time.monotonic() + {timeout_s}\n"
                "ray.init(logging_level='ERROR', log_to_driver=False)\n"
                "while True:\n"
                "    alive = {n['NodeManagerAddress']: n['NodeID']\n"
                "             for n in ray.nodes() if n['Alive']}\n"
                f"    if len(alive) >= {len(self.nodes)} or time.monotonic() > deadline:\n"
                "        print(json.dumps(alive))\n"
                "        break\n"
                "    time.sleep(0.5)\n")
        run = self.run_in("head", [sys.executable, "-c", code], timeout=timeout_s + 60)
        assert run.returncode == 0, run.stderr[-2000:]
        alive = json.loads(run.stdout.strip().splitlines()[-1])
        missing = [node.name for node in self.nodes if node.ip not in alive]
        assert not missing, f"nodes {missing} did not join within {timeout_s:g} s"
        return alive


def _ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "-n", namespace] if namespace else ["ip"]
    subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)


def namespaces_available() -> bool:
    """Whether this process can make network namespaces (root, and a kernel that lets it)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"d2l{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError:
        return False
    _ip("netns", "del", probe)
    return True


def plan(name: str, num_nodes: int, cpus_per_node: int, head_cpus: int | None,
         temp_dir: str, *, namespaces: bool = True) -> NetnsCluster:
    """The nodes' names, namespaces and addresses: the head .1, worker k .(k+1)."""
    assert 1 <= num_nodes <= 250, num_nodes
    nodes = [Node(name="head" if index == 0 else f"w{index}",
                  namespace=(f"{name}-head" if index == 0 else f"{name}-w{index}")
                  if namespaces else None,
                  ip=f"{SUBNET_PREFIX}{index + 1}" if namespaces else "127.0.0.1",
                  num_cpus=cpus_per_node if index or head_cpus is None else head_cpus)
             for index in range(num_nodes)]
    return NetnsCluster(name=name, nodes=nodes, temp_dir=temp_dir,
                        kind="netns" if namespaces else "ray.cluster_utils")


def make_network(cluster: NetnsCluster) -> None:
    """The bridge's namespace, then per node a namespace, its veth pair to the
    bridge, its address and its rate; nothing in the root namespace."""
    bridge_ns = cluster.bridge_namespace
    _ip("netns", "add", bridge_ns)
    _ip("link", "add", BRIDGE, "type", "bridge", namespace=bridge_ns)
    _ip("link", "set", BRIDGE, "up", namespace=bridge_ns)
    for index, node in enumerate(cluster.nodes):
        port = f"n{index}"
        _ip("netns", "add", node.namespace)
        # Both ends are made inside their namespaces, never in the root one.
        _ip("link", "add", NODE_LINK, "netns", node.namespace, "type", "veth",
            "peer", "name", port, "netns", bridge_ns)
        _ip("link", "set", port, "master", BRIDGE, "up", namespace=bridge_ns)
        # Ray's processes talk over 127.0.0.1 too.
        _ip("link", "set", "lo", "up", namespace=node.namespace)
        _ip("addr", "add", f"{node.ip}/{SUBNET_BITS}", "dev", NODE_LINK, namespace=node.namespace)
        _ip("link", "set", NODE_LINK, "up", namespace=node.namespace)
        if cluster.rate:
            # Shapes what the node sends; what it receives is capped by its senders.
            subprocess.run(["ip", "netns", "exec", node.namespace, "tc", "qdisc", "add", "dev",
                            NODE_LINK, "root", "tbf", "rate", cluster.rate, "burst", TBF_BURST,
                            "latency", TBF_LATENCY], check=True, capture_output=True, text=True)


def ray_start_args(cluster: NetnsCluster, node: Node) -> list[str]:
    common = [f"--node-ip-address={node.ip}", f"--num-cpus={node.num_cpus}",
              f"--object-store-memory={OBJECT_STORE_BYTES}", f"--temp-dir={cluster.temp_dir}",
              "--disable-usage-stats"]
    if node is cluster.head:
        return ["--head", f"--port={HEAD_PORT}", "--include-dashboard=true",
                f"--dashboard-host={node.ip}", f"--dashboard-port={DASHBOARD_PORT}", *common]
    return [f"--address={cluster.head_address}", *common]


def start_node(cluster: NetnsCluster, node: Node, log_dir: Path) -> subprocess.Popen:
    """`ray start --block` in the node's namespace, in a process group of its own."""
    ray_start = [RAY_CLI, "start", "--block", *ray_start_args(cluster, node)]
    # A mount namespace of the node's own: its own /dev/shm, and on the private
    # node a tmpfs that hides each private path. Gone with the node's last process.
    hidden = [SHM, *(cluster.private_path.split(os.pathsep)
                     if node.name == cluster.private_node else ())]
    script = ('IFS=:; for hidden in $0; do mount -t tmpfs d2l-private "$hidden" || exit 1; '
              'done; exec "$@"')
    ray_start = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                 ":".join(hidden), *ray_start]
    env = cluster.env()
    env.pop("RAY_ADDRESS")  # `ray start` would take it as the cluster to join
    env["RAY_worker_maximum_startup_concurrency"] = str(node.num_cpus + TRAIN_HELPER_ACTORS)
    # gloo finds its own address from the machine's hostname, which names the
    # root namespace's; the node has only its veth.
    env["GLOO_SOCKET_IFNAME"] = NODE_LINK
    # A node told to stop would first drain for 30 s (Ray 2.60's SIGTERM
    # handler, for Serve); ours stop with their cluster, at once.
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    log = open(log_dir / f"{node.name}.log", "w")
    with log:
        return subprocess.Popen(["ip", "netns", "exec", node.namespace, *ray_start], env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def wait_until_started(cluster: NetnsCluster, node: Node, process: subprocess.Popen,
                       timeout_s: float = START_TIMEOUT_S) -> None:
    """Until the node's `ray start` says its node runs (a head then takes workers)."""
    log = Path(cluster.temp_dir) / f"{node.name}.log"
    deadline = time.monotonic() + timeout_s
    while STARTED_LINE not in log.read_text(errors="replace"):
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{node.name}'s `ray start` exited ({log}):\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node.name} did not start in {timeout_s:g} s ({log})")
        time.sleep(0.2)


def start(cluster: NetnsCluster) -> None:
    """Make the network and start every node; returns once all have joined."""
    Path(cluster.temp_dir).mkdir(parents=True, exist_ok=True)
    for hidden in cluster.private_path.split(os.pathsep) if cluster.private_path else ():
        Path(hidden).mkdir(parents=True, exist_ok=True)  # a mount point
    save_state(cluster)  # before anything exists, so `down` finds what a failed `up` made
    make_network(cluster)
    for node in cluster.nodes:
        process = start_node(cluster, node, Path(cluster.temp_dir))
        node.pid = process.pid
        cluster._procs.append(process)
        save_state(cluster)
        # One at a time: a worker node's `ray start` gives up on a head that is
        # not there yet, and on 2 busy cores nodes started together timed out.
        wait_until_started(cluster, node, process)
    cluster._alive_nodes(timeout_s=START_TIMEOUT_S)


def stop(cluster: NetnsCluster) -> None:
    """Stop every node by its own process group, then kill whatever is left in
    our namespaces (their processes are ours), then delete the namespaces
    (their veths and the bridge go with them) and the temp dir."""
    for node in reversed(cluster.nodes):
        if node.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for node in cluster.nodes:
        while node.pid is not None and _alive(node.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    for process in cluster._procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1)
    existing = set(list_namespaces())
    for namespace in cluster.namespaces:
        if namespace in existing:
            _kill_all_in(namespace)
            _ip("netns", "del", namespace)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but was not waited for yet is a zombie: done.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def _kill_all_in(namespace: str) -> None:
    """SIGKILL every process still in our network namespace, by its id."""
    for _ in range(10):
        pids = namespace_pids(namespace)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def namespace_pids(namespace: str) -> list[int]:
    listing = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in listing.stdout.split() if pid.strip()]


def list_namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in listing.stdout.splitlines() if line.strip()]


def save_state(cluster: NetnsCluster) -> None:
    """What `down` and `status` need, in the cluster's temp dir."""
    state = {"name": cluster.name, "temp_dir": cluster.temp_dir, "rate": cluster.rate,
             "private_path": cluster.private_path, "private_node": cluster.private_node,
             "nodes": [vars(node) for node in cluster.nodes]}
    (Path(cluster.temp_dir) / STATE_FILE).write_text(json.dumps(state, indent=1))


def load_state(temp_dir: str) -> NetnsCluster:
    state = json.loads((Path(temp_dir) / STATE_FILE).read_text())
    nodes = [Node(**node) for node in state.pop("nodes")]
    return NetnsCluster(nodes=nodes, **state)


def default_temp_dir(name: str) -> str:
    # Short: Ray's unix sockets live under it, and a socket's path has 107 bytes at most.
    return os.path.join(tempfile.gettempdir(), name)


@contextlib.contextmanager
def netns_cluster(num_nodes: int, cpus_per_node: int, *, head_cpus: int | None = None,
                  rate: str | None = None, private_path: str | None = None,
                  name: str | None = None, use_namespaces: bool | None = None):
    """A running cluster of `num_nodes` nodes (the head and workers w1, w2, ...),
    each of `cpus_per_node` CPUs (the head `head_cpus` if given); stopped and
    removed on exit. `rate` caps each node's link (tc's units: "100mbit");
    `private_path` (several: joined by os.pathsep) is hidden under an empty
    tmpfs on the last node. Without namespaces (or with
    `use_namespaces=False`): `ray.cluster_utils.Cluster`, which can do neither."""
    name = name or f"d2l{os.getpid()}"
    if use_namespaces is None:
        use_namespaces = namespaces_available()
    cluster = plan(name, num_nodes, cpus_per_node, head_cpus, default_temp_dir(name),
                   namespaces=use_namespaces)
    if not use_namespaces:
        assert rate is None and private_path is None, "a rate and a private path need namespaces"
        with _fallback_cluster(cluster):
            yield cluster
        return
    cluster.rate, cluster.private_path = rate, private_path
    cluster.private_node = cluster.nodes[-1].name if private_path else None
    try:
        start(cluster)
        yield cluster
    finally:
        stop(cluster)


@contextlib.contextmanager
def _fallback_cluster(cluster: NetnsCluster):
    """The nodes as `ray.cluster_utils.Cluster` makes them, in this process's children."""
    from ray._common.utils import get_ray_address_file
    from ray.cluster_utils import Cluster
    from ray.experimental import internal_kv

    # cluster_utils names its head in /tmp/ray/ray_current_cluster, which
    # other clusters of this machine read: put back what was there.
    address_file = Path(get_ray_address_file(None))
    before = address_file.read_text() if address_file.is_file() else None
    Path(cluster.temp_dir).mkdir(parents=True, exist_ok=True)
    options = {"object_store_memory": OBJECT_STORE_BYTES, "temp_dir": cluster.temp_dir}
    ray_cluster = Cluster(shutdown_at_exit=False)
    try:
        for node in cluster.nodes:
            cluster._fallback_nodes.append(ray_cluster.add_node(num_cpus=node.num_cpus, **options))
        cluster._fallback = ray_cluster
        yield cluster
    finally:
        # The head made its GCS this process's Ray key-value store. Left there once
        # the GCS is gone, the first use after (Tune's exit hook, if this process
        # ran Tune) waited 60 s and ended the process with status 1: CI's pytest,
        # all tests passed (stop 84). Cluster.shutdown resets it, but also this
        # process's Ray connection; here, only a store that is the head's.
        store = internal_kv.internal_kv_get_gcs_client()
        ours = (store is not None and ray_cluster.head_node is not None
                and store.address == ray_cluster.gcs_address)
        for ray_node in [*ray_cluster.worker_nodes, ray_cluster.head_node]:
            if ray_node is not None:
                ray_cluster.remove_node(ray_node, allow_graceful=True)
        if ours:
            internal_kv._internal_kv_reset()
        if before is not None:
            address_file.write_text(before)
        else:
            address_file.unlink(missing_ok=True)
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def _describe(cluster: NetnsCluster) -> str:
    lines = [f"cluster {cluster.name}: head at {cluster.head_address}"
             + (f", links capped at {cluster.rate}" if cluster.rate else "")]
    for node in cluster.nodes:
        state = "running" if node.pid is not None and _alive(node.pid) else "stopped"
        private = f", {cluster.private_path} private" if node.name == cluster.private_node else ""
        lines.append(f"  {node.name}: {node.ip} in netns {node.namespace}, {node.num_cpus} CPUs, "
                     f"{state}{private}")
    lines += ["run a driver inside the head's namespace:",
              f"  RAY_AUTH_MODE=token ip netns exec {cluster.head.namespace} {sys.executable} "
              f"experiments/sweep.py --address {cluster.head_address} ...",
              f"dashboard (inside the namespaces): http://{cluster.head.ip}:{DASHBOARD_PORT}",
              f"logs: {cluster.temp_dir}/<node>.log"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--name", default="d2l", help="prefix of the namespaces (default d2l)")
    parser.add_argument("--nodes", type=int, default=3, help="nodes, the head included")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs each node offers Ray")
    parser.add_argument("--head-cpus", type=int, help="CPUs of the head (default --cpus)")
    parser.add_argument("--rate", help="cap each node's link, tc's units (100mbit, 1gbit)")
    parser.add_argument("--private-path", help="a path the last node sees as an empty tmpfs "
                                               "(several: joined by ':')")
    args = parser.parse_args(argv)
    temp_dir = default_temp_dir(args.name)
    if args.command == "up":
        if not namespaces_available():
            parser.error("making network namespaces needs root (and `ip netns`)")
        if Path(temp_dir, STATE_FILE).exists():
            parser.error(f"cluster {args.name} is up: `down` it first")
        cluster = plan(args.name, args.nodes, args.cpus, args.head_cpus, temp_dir)
        cluster.rate, cluster.private_path = args.rate, args.private_path
        cluster.private_node = cluster.nodes[-1].name if args.private_path else None
        started = time.monotonic()
        try:
            start(cluster)
        except BaseException:
            stop(cluster)
            raise
        print(_describe(cluster))
        print(f"up in {time.monotonic() - started:.1f} s")
        return 0
    if not Path(temp_dir, STATE_FILE).exists():
        print(f"no cluster {args.name} here")
        return 1 if args.command == "status" else 0
    cluster = load_state(temp_dir)
    if args.command == "status":
        print(_describe(cluster))
        return 0
    started = time.monotonic()
    stop(cluster)
    print(f"cluster {args.name} down in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
