"""--wait-for-nodes on a cluster whose autoscaler starts its GPU nodes on demand,
as KubeRay's worker groups at `minReplicas: 0` do: a CPU head and none of
them up when the job attaches.

The autoscaler is Ray's own, with Ray's fake multi-node provider, which starts
each node it is asked for as a Ray node on this machine; those nodes declare a
GPU that this machine does not have, so the plans are read from dry runs.
"""

import json
import os
import re
import secrets
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from helpers import DASHBOARD_AGENT_PORT, RAY_CLI, hang_limit, ray_node, run_script, wait_for_head
from orchestrator.driver.cluster import free_local_port

FAKE_PROVIDER = "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"


def _autoscaling_config(gcs_address: str) -> dict:
    """A CPU head and a group of 1-GPU nodes, none at the start and at most 2:
    Ray's fake provider's example config, given as an `external` provider (the
    wheel does not ship the example's defaults file, which `fake_multinode` reads)."""
    commands = ("initialization_commands", "setup_commands", "head_setup_commands",
                "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")
    return {
        "cluster_name": "wait-for-nodes", "max_workers": 2, "upscaling_speed": 1.0,
        "idle_timeout_minutes": 10,  # the nodes stay up for the second script
        "provider": {"type": "external", "module": FAKE_PROVIDER, "gcs_address": gcs_address,
                     "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "gpu": {"resources": {"CPU": 1, "GPU": 1}, "node_config": {}, "min_workers": 0,
                    "max_workers": 2}},
        "head_node_type": "ray.head.default", "auth": {}, "docker": {}, "file_mounts": {},
        "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], **{name: [] for name in commands}}


def _node_ip() -> str:
    """The address the fake provider's nodes register with: this machine's, as Ray finds it."""
    import ray._private.services
    return ray._private.services.get_node_ip_address()


def _stop_the_fake_nodes(gcs_address: str) -> None:
    """The provider starts its nodes inside the head's autoscaler process, as
    children it does not stop when it goes: stopped here by the GCS address only
    they and the head's processes hold."""
    pattern = f"gcs[-_]address={re.escape(gcs_address)}( |$)"
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if subprocess.run(["pkill", f"-{sig.name[3:]}", "-f", pattern]).returncode != 0:
            return  # none left
        deadline = time.monotonic() + 10
        while (subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0
               and time.monotonic() < deadline):
            time.sleep(0.5)


def _requested(address: str, env: dict) -> str:
    """The `From request_resources:` part of `ray status` (Ray's autoscaler's report)."""
    status = subprocess.run([RAY_CLI, "status", f"--address={address}"], env=env,
                            capture_output=True, text=True, timeout=hang_limit(60))
    return status.stdout.partition("From request_resources:")[2].split("Pending Demands")[0]


@pytest.mark.reliability(fault="the GPU nodes are down when the job attaches (autoscaler "
                               "at zero)", lost="nothing")
def test_a_plan_waits_for_the_gpu_nodes_an_autoscaler_starts(tmp_path):
    port = free_local_port(preferred=6379)
    address = f"{_node_ip()}:{port}"
    config = tmp_path / "autoscaling.json"
    config.write_text(json.dumps(_autoscaling_config(address)))
    # Token authentication, Ray's default, with a token of the test's own: `ray start`
    # would otherwise take it on or not by whether ~/.ray/auth_token exists.
    env = {name: value for name, value in os.environ.items()
           if name not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    head_env = {**env, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    gpu_run = ["--address", address, "--use-gpu", "yes", "--workers", "2", "--epochs", "1",
               "--dry-run"]
    try:
        with ray_node("--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                      f"--dashboard-agent-listen-port={free_local_port(DASHBOARD_AGENT_PORT)}",
                      f"--autoscaling-config={config}", env=head_env) as head:
            wait_for_head(head, port)
            # Fitted to the nodes up: the CPU head holds no GPU worker.
            refused = run_script("sweep.py", *gpu_run, "--out", str(tmp_path / "a"),
                                 env=env, timeout_s=120)
            assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
            assert ("1 node, 1 CPU, 0 GPUs can hold at most 0 such workers; this cluster has "
                    "no GPU up: give --wait-for-nodes S where its autoscaler starts GPU nodes "
                    "on demand, or attach") in refused.stderr, \
                refused.stderr[-1500:]

            waited = run_script("sweep.py", *gpu_run, "--wait-for-nodes", "120",
                                "--out", str(tmp_path / "b"), env=env, timeout_s=240)
            output = waited.stdout + waited.stderr
            assert waited.returncode == 0, output[-4000:]
            assert ("asking the cluster's autoscaler for 2 workers of {1 CPU, 1 GPU} (the nodes "
                    "up hold 0 of the 2 workers) and waiting up to 120 s for their nodes"
                    ) in waited.stdout
            assert re.search(r"after \d+ s: Ray cluster at \S+: 3 nodes, 3 CPUs, 2 GPUs, "
                             r"room for 2 of the 2 workers", waited.stdout), waited.stdout
            assert "1 trial, up to 1 at a time, workers on GPUs (NCCL):" in waited.stdout
            assert re.search(r"^  2 workers, global batch 256 .*, on 2 whole nodes", waited.stdout,
                             re.MULTILINE), waited.stdout
            assert "the plan is fitted to them" not in waited.stdout  # not the time running out
            # Withdrawn when the wait ended: the nodes may go once the job is done.
            deadline = time.monotonic() + hang_limit(30)
            while "(none)" not in _requested(address, env):
                assert time.monotonic() < deadline, _requested(address, env)
                time.sleep(1)

            # The nodes are up now: train.py asks for nothing.
            again = run_script("train.py", *gpu_run, "--wait-for-nodes", "60", env=env,
                               timeout_s=120)
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
            assert ("--wait-for-nodes: the nodes up hold the 2 workers of {1 CPU, 1 GPU} "
                    "already") in again.stdout
            assert "asking" not in again.stdout
    finally:
        _stop_the_fake_nodes(address)
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()
