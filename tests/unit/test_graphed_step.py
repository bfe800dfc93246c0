"""Where the training step is captured as a CUDA graph (training/graphed.py), and
what a run records where it is not; the capture itself needs a GPU
(tests/gpu/test_cuda_graph.py)."""

import dataclasses
import json

import pytest
import torch

from helpers import run_here
from orchestrator.config.options import TrainConfig
from orchestrator.errors import UserError
from orchestrator.training.graphed import off_reason

GPU = torch.device("cuda", 0)  # only named: nothing here runs on it


@pytest.mark.parametrize("overrides, reason", [
    ({}, None),
    ({"sync": "bucketed"}, None),
    ({"sync": "root"}, None),
    ({"cuda_graph": "off"}, "off: --cuda-graph off"),
    ({"num_workers": 2}, "off: several workers (their sums run eagerly)"),
    ({"sync": "ddp"}, "off: sync ddp"),
    ({"sync": "delayed"}, "off: sync delayed"),
    ({"precision": "fp16"}, "off: fp16 (its loss scale reads each step's verdict on the host)"),
    ({"model": "examples.own_model:cnn"}, "off: your own model (--cuda-graph on captures it)"),
    ({"model": "examples.own_model:cnn", "cuda_graph": "on"}, None),
])
def test_the_step_is_captured_on_one_gpu_with_a_plain_update(overrides, reason):
    assert off_reason(TrainConfig(**overrides), GPU) == reason


def test_never_on_a_cpu_and_the_run_says_so(fashion_mnist_small):
    config = TrainConfig(num_epochs=1, train_limit=2 * 64, test_limit=64, global_batch_size=64)
    assert off_reason(config, torch.device("cpu")) == "off: not a CUDA device (cpu)"
    history, _ = run_here(config, fashion_mnist_small)
    assert history[-1]["step_graph"] == "off: not a CUDA device (cpu)"


def test_an_unknown_choice_is_one_line():
    with pytest.raises(UserError, match="unknown cuda graph 'always'; choose one of auto, on, off"):
        TrainConfig(cuda_graph="always")


def test_a_failed_captures_routing_is_ended_where_torch_left_it_on(monkeypatch):
    """Before torch 2.12 a capture whose end failed left the allocator routing to its
    pool (pytorch#180395): `_end_routing` ends it there, and takes the allocator's
    "not recording" (a routing torch ended) and a torch without the call as nothing
    to do; from 2.12 torch ends it itself, and the graph's destructor would end it
    a second time. The capture itself: tests/gpu/test_cuda_graph.py."""
    from torch.torch_version import TorchVersion
    from orchestrator.training import graphed
    calls = []
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool",
                        lambda device, pool: calls.append((device, pool)), raising=False)
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.11.0+cu130"))
    graphed._end_routing(1, (0, 7))
    assert calls == [(1, (0, 7))]
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.12.0"))
    graphed._end_routing(1, (0, 8))
    assert calls == [(1, (0, 7))]

    monkeypatch.setattr(torch, "__version__", TorchVersion("2.11.0"))
    def not_recording(device, pool):
        raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", not_recording)
    graphed._end_routing(0, (0, 9))
    monkeypatch.delattr(torch._C, "_cuda_endAllocateToPool")
    graphed._end_routing(0, (0, 10))


class _Capture:
    """torch.cuda.graph as a fake: records the pool it was given; `fails`: its end
    raises, as capture_end does after a step it could not capture."""

    def __init__(self, pools: list, fails: bool):
        self.pools, self.fails = pools, fails

    def __call__(self, graph, pool=None, capture_error_mode="global"):
        self.pools.append(pool)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fails:
            raise RuntimeError("CUDA error: operation failed due to a previous error "
                               "during capture")


@pytest.mark.parametrize("fails", [True, False])
def test_a_capture_names_its_pool_and_a_failed_one_ends_the_routing_to_it(monkeypatch, fails):
    """The wiring of `GraphedStep._capture` (CUDA faked): the pool the capture was
    made in, on the device it was made on, is the one whose routing is ended, only
    after a failure; the stream is restored, the gradients cleared, and the state
    names the step's own error, not capture_end's echo of it."""
    from orchestrator.training import graphed
    pools, ended, streams, cleared = [], [], [], []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: "the graph")
    monkeypatch.setattr(torch.cuda, "graph", _Capture(pools, fails))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, 42))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "the step's stream")
    monkeypatch.setattr(torch.cuda, "set_stream", streams.append)
    monkeypatch.setattr(graphed, "_end_routing", lambda index, pool: ended.append((index, pool)))

    def body(index):
        if fails:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return ("loss",)
    step = graphed.GraphedStep.__new__(graphed.GraphedStep)
    step.body, step.clear, step.index = body, lambda: cleared.append(True), torch.zeros(2)
    step.graph, step.outputs, step.state = None, None, graphed.WARMING_UP
    step._capture()
    assert pools == [(0, 42)]
    if fails:
        assert ended == [(2, (0, 42))] and streams == ["the step's stream"] and cleared
        assert step.state == ("off: capture failed (RuntimeError: CUDA error: operation not "
                              "permitted when stream is capturing)")
        assert step.graph is None
    else:
        assert ended == [] and streams == [] and not cleared
        assert (step.state, step.graph, step.outputs) == (graphed.ON, "the graph", ("loss",))


class _EagerStandIn:
    """GraphedStep's interface with every call run eagerly (a CPU has no CUDA graphs):
    the loop's wiring of a graphed step (the static index it gathers from, the check
    it counts into, the outputs it returns) run on a CPU."""

    def __init__(self, body, clear, batch_size, device, made, state="on"):
        self.body, self.clear = body, clear
        self.index = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.state, self.calls = state, 0
        made.append(self)

    def __call__(self, index, timer):
        self.index.copy_(index)
        self.calls += 1
        started = timer.start()
        outputs = self.body(self.index)
        timer.stop(started)
        return outputs


def test_the_loops_graphed_path_is_its_eager_step_on_a_cpu(fashion_mnist_small, monkeypatch,
                                                           tmp_path):
    """The loop's graphed path (the CUDA graph stood in by eager calls): the same
    parameters, losses and accuracies as the eager step, bit for bit; and with
    `--memory-format auto` the two layouts are timed through such steps too, after
    the graph's warm-up rounds (tests/gpu/test_cuda_graph.py captures them)."""
    from helpers import run_here
    from orchestrator.training import graphed, loop
    config = TrainConfig(model="lenet", global_batch_size=64, lr=0.3, momentum=0.9,
                         num_epochs=2, train_limit=8 * 64, test_limit=200, seed=7,
                         precision="fp64", memory_format="nchw")
    eager, eager_state = run_here(config, fashion_mnist_small)
    made = []
    monkeypatch.setattr(graphed, "off_reason", lambda config, device, held=None: None)
    monkeypatch.setattr(graphed, "GraphedStep",
                        lambda *args: _EagerStandIn(*args, made=made))
    stood_in, stood_in_state = run_here(config, fashion_mnist_small)
    assert len(made) == 1 and made[0].calls == 2 * 8
    assert [row["step_graph"] for row in stood_in] == ["on", "on"]
    for got, want in zip(stood_in, eager, strict=True):
        assert (got["train_loss"], got["train_acc"], got["test_acc"]) == (
            want["train_loss"], want["train_acc"], want["test_acc"])
    for name, tensor in eager_state["model"].items():
        assert torch.equal(stood_in_state["model"][name], tensor), name
    # --memory-format auto: each layout timed through such a step, after the graph's
    # warm-up rounds (3 eager steps, the capture, a replay), under the graphed key.
    from orchestrator.training import layout
    rounds = []
    time_layouts = layout.time_layouts

    def recording(step, device, **options):
        rounds.append(options.get("warmup_rounds", 1))
        return time_layouts(step, device, **options)
    monkeypatch.setattr(layout, "time_layouts", recording)
    monkeypatch.setattr(layout, "cache_path", lambda: tmp_path / "layouts.json")
    auto = dataclasses.replace(config, memory_format="auto", num_epochs=1)
    made.clear()
    history = loop.run_training(auto, fashion_mnist_small, device=torch.device("cpu"),
                                report=lambda *_: None, layout_scope="graphed")
    layouts, run = made[:2], made[2]
    assert rounds == [graphed.WARMUP_STEPS + 2]
    assert layouts[0].calls == layouts[1].calls > graphed.WARMUP_STEPS + 2  # and timed
    assert run.calls == 8 and history[-1]["layout_nchw_step_s"] > 0
    (key,) = json.loads((tmp_path / "layouts.json").read_text())["entries"]
    assert json.loads(key)[-1] is True
    # A capture that failed ran its steps eagerly: both layouts are timed again, eagerly.
    monkeypatch.setattr(graphed, "GraphedStep", lambda *args: _EagerStandIn(
        *args, made=made, state="off: capture failed (RuntimeError: ...)"))
    rounds.clear()
    loop.run_training(auto, fashion_mnist_small, device=torch.device("cpu"),
                      report=lambda *_: None, layout_scope="a capture failed")
    assert rounds == [graphed.WARMUP_STEPS + 2, 1]


def test_why_a_sweep_holds_auto_off_reaches_the_workers_record(monkeypatch, fashion_mnist_small):
    """SweepConfig.graph_held_off's reason, from the sweep's Tune points to the trial's
    Train run to the workers' loop, where epochs.csv's `step_graph` records it (on a
    CPU here, which never captures: the reason is checked before the device). Each
    hop with its neighbours stubbed: Tune's Tuner, Ray Train's trainer and context."""
    from orchestrator.config.grid import SweepConfig
    from orchestrator.driver import trial, tune_experiment
    from orchestrator.training import worker
    from orchestrator.training.loop import run_training

    sweep = SweepConfig(workers=(1, 2), base=TrainConfig(use_gpu=True, num_epochs=1))
    why = sweep.graph_held_off
    assert why.startswith("auto, in a sweep that times 1 and 2 workers against each other")

    class _Stop(Exception):
        pass
    spaces = []

    def tuner(trainable, *, param_space, **rest):
        spaces.append(param_space)
        raise _Stop
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "10")
    monkeypatch.setenv("RAY_TRAIN_ENABLE_STATE_TRACKING", "1")  # run_trial's setdefault
    monkeypatch.setenv("RAY_AIR_NEW_OUTPUT", "0")
    monkeypatch.setattr(tune_experiment.tune, "with_parameters", lambda function, **_: function)
    monkeypatch.setattr(tune_experiment.tune, "with_resources", lambda function, _: function)
    monkeypatch.setattr(tune_experiment.tune, "Tuner", tuner)
    with pytest.raises(_Stop):
        tune_experiment.run_experiment(sweep, "data", storage_path="/tmp/unused", sweep_id="s",
                                       max_concurrent=1, resume=False)
    points = spaces[-1]["point"]["grid_search"]
    assert [point["graph_held_off"] for point in points] == [why] * len(sweep.grid)
    point = points[0]
    calls = []
    monkeypatch.setattr(tune_experiment, "run_trial", lambda *args, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(tune_experiment.tune, "get_context",
                        lambda: type("Context", (), {"get_trial_id": lambda self: "t1"})())
    tune_experiment.tune_trial({"point": point}, ["data"], "runs")
    assert calls[-1]["graph_held_off"] == why
    loop_configs = []

    class _Fitted:
        def fit(self):
            return "fitted"
    monkeypatch.setattr(trial, "_trainer", lambda loop, config, loop_config, *rest:
                        loop_configs.append(loop_config) or _Fitted())
    assert trial.run_trial(TrainConfig(), "data", name="t1", graph_held_off=why) == "fitted"
    assert loop_configs[-1]["graph_held_off"] == why
    runs = []
    context = type("Context", (), {"get_node_id": lambda self: "node",
                                   "get_job_id": lambda self: "job"})()
    monkeypatch.setattr(worker.ray, "get", lambda ref: fashion_mnist_small)
    monkeypatch.setattr(worker.ray, "get_runtime_context", lambda: context)
    monkeypatch.setattr(worker.ray.train, "get_checkpoint", lambda: None)
    monkeypatch.setattr(worker.ray.train.torch, "get_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(worker, "run_training", lambda *args, **kwargs: runs.append(kwargs))
    # A worker process's own settings, not this test process's.
    monkeypatch.setattr(worker.torch, "set_num_threads", lambda count: None)
    monkeypatch.setattr(worker.ray_fastpath, "prepare_worker_process", lambda: None)
    worker.train_loop_per_worker({**loop_configs[-1], "train_config": TrainConfig().to_dict()})
    assert runs[-1]["graph_held_off"] == why
    config = TrainConfig(num_epochs=1, train_limit=2 * 64, test_limit=64, global_batch_size=64)
    history = run_training(config, fashion_mnist_small, device=torch.device("cpu"),
                           report=lambda *_: None, graph_held_off=why)
    assert history[-1]["step_graph"] == f"off: {why}"


def test_a_gpu_torch_cannot_use_is_named_before_the_loop_starts(monkeypatch):
    """Ray hands out the GPUs NVML counts, whatever CUDA torch was built for: where
    the node's driver is too old for it, the worker stops in one error that names
    torch's own cause and the ways out, not at the first tensor put on the device."""
    from orchestrator.training.worker import usable_device
    assert usable_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def too_old():
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 12040).\n"
                           "Please update your GPU driver")
    monkeypatch.setattr(torch.cuda, "init", too_old)
    with pytest.raises(RuntimeError) as raised:
        usable_device(GPU)
    message = str(raised.value)
    assert message.startswith(f"Ray gave this worker a GPU, but torch {torch.__version__} "
                              f"(built for CUDA {torch.version.cuda}) cannot use it: The NVIDIA "
                              f"driver on your system is too old (found version 12040): install "
                              f"a torch for the node's NVIDIA driver")
    assert "TORCH_INDEX_URL=" in message and message.endswith("or run with --use-gpu no")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert usable_device(GPU) == GPU
