"""Helpers the tests share (fixtures and hooks stay in conftest.py)."""

import contextlib
import functools
import importlib.util
import io
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
from ray.util.state import list_actors, list_placement_groups

from orchestrator.config.options import SYNC_STRATEGIES, TrainConfig
from orchestrator.config.dataset import even_shares
from orchestrator.training.loop import run_training
from orchestrator.training.models import build_model
# As imported here, before a test replaces the module's (`overflowing`).
from orchestrator.training.step import forward_backward as forward_backward_unpatched

REPO = Path(__file__).resolve().parents[1]

# -- Hang limits. A test's timeout detects a hang; it never asserts a speed
# (bench/ does). The limits were set on a 2-core Intel Xeon (Sapphire Rapids)
# with AVX-512, where one thread's LeNet step below takes 21-22 ms (31-34 ms
# with torch held to its AVX2 kernels); a machine whose step takes longer (a
# CPU without AVX-512: up to 3x per core) gets every limit scaled by as much,
# so that it fails only what hangs.
REFERENCE_STEP_S = 0.0215


@functools.cache
def slowness() -> float:
    """How many times slower than the reference machine this one runs one
    thread's LeNet step, at least 1; timed once a test session."""
    return max(1.0, lenet_step_s() / REFERENCE_STEP_S)


def lenet_step_s() -> float:
    """Seconds of one thread's LeNet step (batch 64, fp32, forward, backward,
    update): the best of five timings of four steps (a fraction of a second)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_model("lenet", seed=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        images, labels = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(4):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(images), labels).backward()
                optimizer.step()
            best = min(best, (time.perf_counter() - started) / 4)
    finally:
        torch.set_num_threads(threads)
    return best


def hang_limit(seconds: float) -> float:
    """A limit of `seconds` on the reference machine, scaled to this one's `slowness`."""
    return seconds * slowness()


@contextlib.contextmanager
def shared_dict():
    """A dict that the processes a test starts fill in, served by a Manager.

    Spawned, never forked: a Manager forked from a pytest process that had run
    Ray trials left the session's Ray unreachable.
    """
    with multiprocessing.get_context("spawn").Manager() as manager:
        yield manager.dict()


def num_actors(class_name: str, address: str | None = None) -> int:
    """How many actors of this class a Ray (by default the one this process is
    connected to) has had, dead ones included.

    Ray names a class defined in a function by its name or, in some runs, by
    its qualified name (`ImplicitFunc` or `wrap_function.<locals>.ImplicitFunc`).
    """
    return sum(actor["class_name"] == class_name or actor["class_name"].endswith(f".{class_name}")
               for actor in list_actors(address=address, limit=10_000,
                                        raise_on_missing_output=False))


def num_live_placement_groups() -> int:
    """How many placement groups the connected Ray holds that are not removed."""
    return sum(group.state != "REMOVED"
               for group in list_placement_groups(limit=10_000, raise_on_missing_output=False))


def run_script(script: str, *args: str, timeout_s: float = 600, env=None) -> subprocess.CompletedProcess:
    """Run one of experiments/*.py as a user would, capturing its output;
    `timeout_s` is a hang limit on the reference machine (`hang_limit`)."""
    return subprocess.run([sys.executable, str(REPO / "experiments" / script), *args],
                          capture_output=True, text=True, timeout=hang_limit(timeout_s), env=env,
                          cwd=REPO)


def popen_script(script: str, *args: str, stdout=subprocess.PIPE) -> subprocess.Popen:
    """Start one of experiments/*.py as a user would, its output (stderr too) as
    text lines, in a session of its own: a test signals or kills its process group."""
    return subprocess.Popen([sys.executable, "-u", str(REPO / "experiments" / script), *args],
                            stdout=stdout, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            start_new_session=True)


def read_until(process: subprocess.Popen, pattern: str, timeout_s: float, seen: list[str]) -> str:
    """Read the process's output line by line until a line matches `pattern`;
    every line read goes to `seen`. `timeout_s` is a hang limit (`hang_limit`)."""
    deadline = time.monotonic() + hang_limit(timeout_s)
    for line in process.stdout:
        seen.append(line)
        if re.search(pattern, line):
            return line
        assert time.monotonic() < deadline, f"no line matched {pattern!r}:\n{''.join(seen[-40:])}"
    raise AssertionError(f"output ended before {pattern!r}:\n{''.join(seen[-40:])}")


# For `ray start --block` nodes a test stops by their handle: stopped at once,
# not after Ray 2.60's drain of up to 30 s on SIGTERM, which a node that ran a
# Train job always sits out (Train's state actor keeps the head busy).
STOP_AT_ONCE = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}

RAY_CLI = os.path.join(os.path.dirname(sys.executable), "ray")
# Ray's default port for a node's dashboard agent: fixed, so two nodes on one
# machine (another test's among them) need one each.
DASHBOARD_AGENT_PORT = 52365


def wait_for_head(head: subprocess.Popen, port: int) -> None:
    """Until the head started by `ray start` answers on `port` (a minute at most)."""
    deadline = time.monotonic() + hang_limit(60)
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
    while subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0:
        assert head.poll() is None and time.monotonic() < deadline, "the head did not start"
        time.sleep(1)


@contextlib.contextmanager
def ray_node(*args: str, env: dict):
    """`ray start --block ARGS`, stopped by its own handle: --block keeps the
    node in the foreground, so stopping this one process stops that node, at once
    (STOP_AT_ONCE), and only it (`ray stop` would stop every Ray here)."""
    node = subprocess.Popen([RAY_CLI, "start", "--block", *args], env={**env, **STOP_AT_ONCE},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield node
    finally:
        node.terminate()
        node.wait(timeout=60)


def import_tool(name: str):
    """tools/<name>.py as a module (tools/ is no package: its scripts are run by hand)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: its dataclasses look themselves up
        spec.loader.exec_module(module)
    return sys.modules[name]


def import_bench(name: str, monkeypatch):
    """bench/<name>.py as a module, with bench/ on sys.path for its `common` (each
    script's `main` is guarded, so nothing runs)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mixed_tensors(rank: int) -> list[torch.Tensor]:
    """Rank + 1 in tensors of mixed sizes and dtypes, so that the collectives'
    bucketing splits and regroups them."""
    return [torch.full((3, 4), rank + 1.0), torch.arange(10.0) * (rank + 1),
            torch.full((2,), rank + 1, dtype=torch.float64), torch.ones(1000) * (rank + 1)]


# -- k workers against one device: the cases, runs and checks that the
# equivalence tests (tests/*/test_equivalence*.py) and the proportional
# split's (tests/*/test_split*.py) share, whichever layer they are in.

# Two epochs of three steps: several updates, and a reshuffle in between.
STEPS_PER_EPOCH = 3
# float64 rounding of a few steps is near 1e-15 of the values; a wrong sum
# (a shard counted twice or missed, a mean instead of a sum) is off by tens of
# percent.
FP64_RTOL = 1e-9
FP32_RTOL = 1e-5
# Updates this small are float64 rounding of a gradient that is zero.
ZERO_UPDATE = 1e-12
TEST_LIMIT = 200
# Every strategy but `delayed`, which is another optimizer: one-step-delayed SGD,
# checked against its own one-process reference in tests/processes/test_delayed_sync.py.
EXACT_STRATEGIES = tuple(sync for sync in SYNC_STRATEGIES if sync != "delayed")
# 257 splits unevenly on 2 (129 + 128) and on 3 workers (86 + 86 + 85).
LENET_CASES = [(sync, "lenet", 257, precision, memory_format)
               for memory_format in ("nchw", "channels-last") for precision in ("fp64", "fp32")
               for sync in EXACT_STRATEGIES]
CPU = torch.device("cpu")


def equivalence_config(case, **overrides) -> TrainConfig:
    """The run of `case`, (sync, model, global batch size, precision, memory format)."""
    sync, model, global_batch_size, precision, memory_format = case
    return TrainConfig(model=model, sync=sync, global_batch_size=global_batch_size, lr=0.5,
                       num_epochs=2, train_limit=STEPS_PER_EPOCH * global_batch_size,
                       test_limit=TEST_LIMIT, seed=7, precision=precision,
                       memory_format=memory_format, **overrides)


# Two runs compared bit for bit need one layout: `auto` times NCHW and channels-last
# at each run's start and may pick either under a busy CPU, and the two layouts'
# kernels sum in other orders (a mid-epoch checkpoint test failed so beside a CI run).
ONE_LAYOUT = {"memory_format": "nchw"}


def train_reporting(config: TrainConfig, dataset, resume_from=None, stop_at=None
                    ) -> tuple[list[dict], list[tuple]]:
    """One run in this process on the CPU: its epoch history, and every report it made
    as (metrics, state, history, evaluations)."""
    reports = []
    history = run_training(config, dataset, device=CPU, resume_from=resume_from,
                           report=lambda metrics, state, hist, evaluations: reports.append(
                               (metrics, state, list(hist), list(evaluations))),
                           stop_at=stop_at)
    return history, reports


def run_here(config: TrainConfig, dataset, device: torch.device = CPU) -> tuple[list[dict], dict]:
    """The epoch history and the final state (model, optimizer) of one run in
    this process (on the CPU unless told)."""
    states = []
    history = run_training(config, dataset, device=device,
                           report=lambda metrics, state, *_: states.append(state))
    return history, {"model": {name: tensor.cpu() for name, tensor in states[-1]["model"].items()},
                     "optimizer": states[-1]["optimizer"]}


def assert_same_parameters(got: dict, expected: dict, initial: dict, precision: str) -> None:
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, name
        if not want.is_floating_point():  # BatchNorm's num_batches_tracked
            assert torch.equal(got[name], want), name
            continue
        if precision == "fp32":
            torch.testing.assert_close(got[name], want, rtol=FP32_RTOL, atol=FP32_RTOL,
                                       msg=lambda message: f"{name}: {message}")
            continue
        # The book's small init makes some weights' updates tiny next to the
        # weights, so it is the updates that must agree, each to a relative 1e-9
        # of the largest update of its tensor.
        want_update = want - initial[name].to(want.dtype)
        if name.endswith(("running_mean", "running_var")):
            want_update = want  # statistics, not updates
        scale = want_update.abs().max().item()
        if scale < ZERO_UPDATE:
            # A gradient that is zero but for rounding: a convolution's bias
            # that a BatchNorm follows, which subtracts it again.
            assert (got[name] - (want - want_update)).abs().max() < ZERO_UPDATE, name
            continue
        torch.testing.assert_close(got[name] - (want - want_update), want_update, rtol=FP64_RTOL,
                                   atol=FP64_RTOL * scale,
                                   msg=lambda message: f"update of {name}: {message}")


UNEVEN_BATCH = 255  # 128 + 127 on 2 workers, 85 each on 3 before the first re-split


def proportional_config(num_workers: int, sync: str) -> TrainConfig:
    """An fp64 LeNet run whose shares are re-set at every step from its timings.

    Its last worker emulates a device 2x slower, so that the shares surely move:
    workers of one speed stay within the split's MIN_GAIN and keep even shares
    (a full CI run on the 2-core EPYC, 2026-11-29: the Ray test's did)."""
    return equivalence_config((sync, "lenet", UNEVEN_BATCH, "fp64", "nchw"), num_workers=num_workers,
                              split="proportional", split_interval_steps=1,
                              straggler_slowdown=2.0)


def one_device_split_reference(dataset) -> dict[str, torch.Tensor]:
    """The final parameters of the proportional runs' reference: every strategy
    is one update on one device."""
    _, state = run_here(equivalence_config(("scratch", "lenet", UNEVEN_BATCH, "fp64", "nchw")), dataset)
    return state["model"]


def uneven(history: list[dict]) -> bool:
    """Whether some epoch's shares were not the even split."""
    return any(row["worker_shares"] != list(even_shares(row["global_batch_size"],
                                                        row["num_workers"]))
               for row in history)


def assert_same_updates(state: dict, reference: dict) -> None:
    """As the equivalence tests check fp64 runs: every update to a relative
    1e-9 of its tensor's largest."""
    initial = build_model("lenet", seed=7).state_dict()
    for name, expected in reference.items():
        expected_update = expected - initial[name].double()
        assert expected_update.abs().max() > 0, name
        torch.testing.assert_close(state[name] - initial[name].double(), expected_update,
                                   rtol=FP64_RTOL,
                                   atol=FP64_RTOL * expected_update.abs().max().item(),
                                   msg=lambda message: f"update of {name}: {message}")


# The command-line options of a small sweep or training run on real data.
SMALL = ["--batch-size", "64", "--epochs", "1", "--train-limit", "2048", "--test-limit", "500"]


def heavy_imports_of(modules: list[str]) -> list[str]:
    """Which of torch and ray a fresh interpreter holds after importing `modules`
    of this checkout (this process has both already)."""
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules} & "
            "{'torch', 'ray'})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def sweep_on(cluster, *args: str, timeout_s: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """experiments/sweep.py as a user on a tools/netns_cluster.py cluster's head
    runs it: inside the head's namespace, attached to the cluster (`timeout_s`:
    a hang limit on the reference machine)."""
    return cluster.run_in("head", [sys.executable, "experiments/sweep.py", "--address",
                                   cluster.head_address, *args],
                          cwd=REPO, timeout=hang_limit(timeout_s), **kwargs)


def run_main(script: str, *args: str) -> subprocess.CompletedProcess:
    """experiments/`script`'s main run in this process, its output captured: bad
    input refused before anything starts costs no interpreter of its own here
    (run_script, and test_installed_commands, test the scripts as processes)."""
    from orchestrator.driver import commands

    main = {"sweep.py": commands.sweep_main, "train.py": commands.train_main}[script]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's own errors
            code = exit.code
    return subprocess.CompletedProcess([script, *args], code, stdout.getvalue(),
                                       stderr.getvalue())


def refusal(run: subprocess.CompletedProcess, out_dir: Path) -> str:
    """The one stderr line of a run refused before anything started: exit status
    2, nothing printed to stdout, nothing written to `out_dir`."""
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-3000:]
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not run.stdout, run.stdout[-2000:]
    assert not out_dir.exists()
    return run.stderr


# fp16's loss scale across workers (tests/processes/test_fp16_loss_scale.py, and on
# CUDA tests/gpu/test_strategies_on_gpus.py): 3 steps of LeNet at an uneven global
# batch, the 2nd of which overflows float16 on one worker.
FP16_OVERFLOW_STEP = 1  # from 0, of 3: a step before it and one after it, at half the scale
# Small enough that LeNet's gradients never overflow float16 of themselves: the one
# overflow is the injected one, so that a skip cannot hinge on a shard's rounding.
FP16_INITIAL_SCALE = 2.0 ** 8
# Of the whole update's norm (test_fp16_loss_scale.py says why).
FP16_UPDATE_RTOL = 2.5e-3
OVERFLOW_RANK = 1  # the worker whose batch overflows


def fp16_config(sync: str, **overrides) -> TrainConfig:
    """One epoch of 3 steps of 257 (uneven shards) in fp16, with momentum."""
    config = equivalence_config((sync, "lenet", 257, "fp16", "nchw"), momentum=0.5, **overrides)
    return TrainConfig(**{**config.to_dict(), "num_epochs": 1})


def overflowing(overflows: bool):
    """The step's forward and backward (step.forward_backward), whose
    FP16_OVERFLOW_STEP-th call from this one on multiplies the loss by 2^30 where
    `overflows`: a batch whose backward overflows float16 on this worker."""
    calls = [0]

    def forward_backward(model, images, labels, config, *, loss_scale=1.0):
        calls[0] += 1
        if calls[0] - 1 == FP16_OVERFLOW_STEP and overflows:
            loss_scale *= 2.0 ** 30
        return forward_backward_unpatched(model, images, labels, config, loss_scale=loss_scale)

    return forward_backward


def assert_fp16_runs_agree(history: list[dict], state: dict, want_history: list[dict],
                           want_state: dict) -> None:
    """The same skipped step and scale, and the whole update to FP16_UPDATE_RTOL."""
    assert [row["skipped_steps"] for row in history] == [
        row["skipped_steps"] for row in want_history] == [1]
    assert [row["loss_scale"] for row in history] == [
        row["loss_scale"] for row in want_history] == [FP16_INITIAL_SCALE / 2]
    initial = build_model("lenet", seed=7).state_dict()
    want_update = torch.cat([(want - initial[name]).flatten()
                             for name, want in want_state["model"].items()])
    got_update = torch.cat([(state["model"][name] - initial[name]).flatten()
                            for name in want_state["model"]])
    difference = ((got_update - want_update).norm() / want_update.norm()).item()
    assert difference < FP16_UPDATE_RTOL, difference
