"""`--memory-format`: the option, the rule that picks a layout, and the node's cache
of timings, with an injected measurement (the workers' agreement across
processes: tests/processes/test_memory_format_agreement.py)."""

import math
import time

import pytest
import torch

from orchestrator.config import cli
from orchestrator.config.options import TrainConfig
from orchestrator.driver import checks, commands
from orchestrator.records import memory_format_text
from orchestrator.training import layout
from orchestrator.training.loop import run_training

CPU = torch.device("cpu")


class Measurements:
    """An injected measurement: the given seconds per step, and how often it was asked."""

    def __init__(self, nchw_s: float, channels_last_s: float):
        self.step_s = {"nchw": nchw_s, "channels-last": channels_last_s}
        self.calls = 0

    def __call__(self) -> dict[str, float]:
        self.calls += 1
        return dict(self.step_s)


@pytest.mark.parametrize("nchw_s, channels_last_s, faster", [
    (0.10, 0.07, "channels-last"), (0.07, 0.10, "nchw"), (0.10, 0.10, "nchw")])
def test_auto_takes_the_faster_layout_and_records_both_timings(tmp_path, nchw_s,
                                                               channels_last_s, faster):
    chosen = layout.choose(TrainConfig(), CPU, Measurements(nchw_s, channels_last_s),
                           scope="sweep 1", cache=tmp_path / "cache.json")
    assert chosen == {"memory_format": faster, "layout_nchw_step_s": nchw_s,
                      "layout_channels_last_step_s": channels_last_s}


@pytest.mark.parametrize("memory_format", ["nchw", "channels-last"])
def test_a_named_format_is_used_without_timing(tmp_path, memory_format):
    measure = Measurements(0.1, 0.1)
    chosen = layout.choose(TrainConfig(memory_format=memory_format), CPU, measure,
                           scope="sweep 1", cache=tmp_path / "cache.json")
    assert chosen == {"memory_format": memory_format, "layout_nchw_step_s": None,
                      "layout_channels_last_step_s": None}
    assert measure.calls == 0 and not (tmp_path / "cache.json").exists()


def test_a_node_times_each_model_batch_and_precision_once_a_sweep(tmp_path):
    cache = tmp_path / "cache.json"
    measure = Measurements(0.10, 0.07)

    def choose(scope="sweep 1", **options):
        return layout.choose(TrainConfig(**options), CPU, measure, scope=scope, cache=cache)

    first = choose()
    assert measure.calls == 1
    measure.step_s = {"nchw": 0.07, "channels-last": 0.10}  # what a new timing would say
    assert choose() == first and measure.calls == 1  # the sweep's next trial: from the cache
    assert choose(num_workers=2)["memory_format"] == "nchw"  # batch 128 per worker: timed
    assert choose(precision="bf16")["memory_format"] == "nchw"
    assert choose(threads_per_worker=2)["memory_format"] == "nchw"
    assert measure.calls == 4
    assert choose(scope="sweep 2")["memory_format"] == "nchw"  # another sweep times afresh
    assert measure.calls == 5
    assert choose(scope="sweep 1")["memory_format"] == "nchw"  # the file keeps one sweep's
    assert measure.calls == 6
    assert [path.name for path in tmp_path.iterdir()] == ["cache.json"]  # no temporary left


def test_an_unreadable_cache_is_measured_again(tmp_path):
    cache = tmp_path / "cache.json"
    cache.write_text('{"scope": "sweep 1", "entr')  # never written so, but a disk may fail
    measure = Measurements(0.10, 0.07)
    assert layout.choose(TrainConfig(), CPU, measure, scope="sweep 1",
                         cache=cache)["memory_format"] == "channels-last"
    assert measure.calls == 1


def test_layouts_are_timed_alternately_after_a_warm_up_each():
    calls = []
    step_s = layout.time_layouts(calls.append, CPU, num_steps=3)
    assert calls == ["nchw", "channels-last"] * 4
    assert set(step_s) == {"nchw", "channels-last"}
    assert all(seconds >= 0 for seconds in step_s.values())


def test_a_slow_step_is_timed_fewer_times_but_once_at_least():
    calls = []

    def slow_step(name):  # a warm-up of 0.1 s a layout: 0.29 s of budget fits 2 steps
        calls.append(name)  # (and still 2 if a loaded machine's sleep overshoots by 45 ms)
        time.sleep(0.1)

    layout.time_layouts(slow_step, CPU, num_steps=8, budget_s=0.29)
    assert calls == ["nchw", "channels-last"] * 3
    calls.clear()
    layout.time_layouts(slow_step, CPU, num_steps=8, budget_s=0.01)
    assert calls == ["nchw", "channels-last"] * 2


def test_a_graphed_step_is_timed_after_its_warm_up_rounds_by_the_last_ones_time():
    """A CUDA graph's layouts: eager warm-up steps and the capture are slow, its
    replays fast; the number of timed steps follows the last warm-up round."""
    calls = []

    def step(name):  # two slow rounds (eager, the capture), then fast ones
        calls.append(name)
        if len(calls) <= 4:
            time.sleep(0.1)

    layout.time_layouts(step, CPU, num_steps=8, budget_s=0.29, warmup_rounds=3)
    assert calls == ["nchw", "channels-last"] * (3 + 8)


def test_graphed_and_eager_timings_are_kept_apart(tmp_path):
    cache = tmp_path / "cache.json"
    eager, graphed = Measurements(0.10, 0.07), Measurements(0.05, 0.06)
    config = TrainConfig()
    assert layout.choose(config, CPU, eager, scope="s", cache=cache)["memory_format"] == (
        "channels-last")
    assert layout.choose(config, CPU, graphed, scope="s", cache=cache,
                         graphed=True)["memory_format"] == "nchw"
    assert (eager.calls, graphed.calls) == (1, 1)


def test_the_report_names_the_format_and_what_auto_timed():
    timed = {"memory_format": "channels-last", "layout_nchw_step_s": 0.1123,
             "layout_channels_last_step_s": 0.0831}
    assert memory_format_text(timed) == (
        "channels-last (auto: NCHW 0.112 s, channels-last 0.0831 s a step)")
    named = {"memory_format": "nchw", "layout_nchw_step_s": math.nan,  # as pandas reads it
             "layout_channels_last_step_s": math.nan}
    assert memory_format_text(named) == "nchw"


def test_memory_format_flag_defaults_to_auto_and_takes_each_format():
    run, _ = checks.run_request(cli.train_parser("").parse_args([]))
    assert run.memory_format == "auto"
    for name in ("nchw", "channels-last"):
        args = cli.sweep_parser("").parse_args(["--memory-format", name])
        assert cli.config_options(args) == {"memory_format": name}


def test_an_unknown_memory_format_is_one_line_and_exit_2(capsys):
    assert commands.train_main(["--memory-format", "nhwc"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("error: unknown memory format 'nhwc'; choose one of auto, nchw, "
                            "channels-last\n")
    assert captured.out == ""


def test_a_resumed_run_keeps_the_layout_it_chose(fashion_mnist_small, monkeypatch, tmp_path):
    timings = []

    def time_layouts(step, device, **_):
        timings.append(step)
        return {"nchw": 0.2, "channels-last": 0.1} if len(timings) == 1 else {
            "nchw": 0.1, "channels-last": 0.2}
    monkeypatch.setattr(layout, "time_layouts", time_layouts)
    config = TrainConfig(global_batch_size=256, num_epochs=2, train_limit=512, test_limit=200)
    reports = []

    def train(scope, resume_from=None):
        return run_training(config, fashion_mnist_small, device=CPU, resume_from=resume_from,
                            layout_scope=scope, report=lambda *report: reports.append(report))
    history = train(f"first run in {tmp_path}")
    assert [row["memory_format"] for row in history] == ["channels-last"] * 2
    _, state, history_after_1, evaluations = reports[0]
    resumed = train(f"resumed in {tmp_path}", resume_from=(state, history_after_1, evaluations))
    assert len(timings) == 1  # not timed again, although a new timing would say nchw
    assert resumed[-1]["memory_format"] == "channels-last"
    assert resumed[-1]["layout_channels_last_step_s"] == 0.1
    assert reports[-1][1]["model"]["3.weight"].is_contiguous(memory_format=torch.channels_last)
