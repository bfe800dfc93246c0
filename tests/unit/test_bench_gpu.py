"""The GPU benchmarks' scripts (bench/gpu.py, gpu_step.py, gpu_check.py) where they
only parse options, find no GPU or read their records: each calls its `main` or
its functions here, without a second Python's start (1.7 s each). Neither may
touch bench/results. Their runs as commands (the CPU smoke runs, the torchrun
baseline, a step stopped whole): tests/processes/test_gpu_bench_commands.py.
"""

import json

import pandas as pd
import pytest
import torch

from helpers import REPO, import_bench

RESULTS = REPO / "bench" / "results" / "gpu.jsonl"


def _exit_code(main, argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_it_did_not_run(monkeypatch, capsys):
    before = RESULTS.read_bytes() if RESULTS.exists() else None
    import_bench("gpu", monkeypatch).main(["--no-append"])
    assert (RESULTS.read_bytes() if RESULTS.exists() else None) == before
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("BENCH ")]
    record = json.loads(line.removeprefix("BENCH "))
    assert record["ran"] is False and "no CUDA device" in record["reason"]
    assert record["target_met"] == "not measured: no GPU on this machine"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_check_without_a_gpu_says_so_in_one_line_and_writes_nothing(tmp_path, monkeypatch,
                                                                         capsys):
    results = REPO / "bench" / "results"
    before = {path.name: path.read_bytes() for path in results.iterdir()}
    assert import_bench("gpu_check", monkeypatch).main(
        ["--out", str(tmp_path / "out"), "--record"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [out.strip()]
    assert "no CUDA device on this machine" in out
    assert {path.name: path.read_bytes() for path in results.iterdir()} == before
    assert not (tmp_path / "out").exists()


def test_gpu_check_says_what_it_runs_and_where_it_writes(monkeypatch, capsys):
    main = import_bench("gpu_check", monkeypatch).main
    assert _exit_code(main, ["--help"]) == 0
    usage = capsys.readouterr().out
    for part in ("--out", "--budget-s", "--record", "--data-dir", "--steps"):
        assert part in usage
    # Without a folder for its files, or with a step it does not have, it refuses at
    # once (argparse: exit 2).
    assert _exit_code(main, []) == 2 and "--out" in capsys.readouterr().err
    assert _exit_code(main, ["--out", "unused", "--steps", "tests_gpu,warmup"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "unknown step(s) warmup; choose from tests_cuda_graph, tests_gpu, main_job, d2l_13_6, "
        "loop_alone, torchrun")


def test_gpu_step_refuses_an_unknown_way_in_one_line(monkeypatch, capsys):
    main = import_bench("gpu_step", monkeypatch).main
    assert _exit_code(main, ["--ways", "eager,compiled"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "unknown way(s) compiled; choose from eager, fused, bf16_cl, graph, graph_bf16_cl, "
        "graph_b512, project, project_bf16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_step_without_a_gpu_says_so_in_one_line(monkeypatch, capsys):
    assert import_bench("gpu_step", monkeypatch).main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu_step: no CUDA device on this machine")
    assert len(out.splitlines()) == 1


def test_gpu_check_records_where_each_sweeps_time_went(tmp_path, monkeypatch):
    """A sweep's figures carry its time split (report.md's "Where the time went"),
    so that a lent GPU's record says which fixed cost kept the check long."""
    import shutil
    folder = tmp_path / "sweep"
    shutil.copytree(REPO / "tests" / "data" / "exercises-quick-current", folder)
    (folder / "sessions.json").write_text(json.dumps(
        [{"ended": "x", "wall_s": 300, "calibration_s": 20.0, "trials_s": 270.0}]))
    figures = import_bench("gpu_check", monkeypatch).sweep_figures(folder)
    split = figures["time_split_s"]
    assert (split["wall_s"], split["calibration_s"], split["trials_s"]) == (300, 20.0, 270.0)
    epochs = pd.read_csv(folder / "epochs.csv")
    assert split["training"] == pytest.approx(epochs["epoch_time_s"].sum(), abs=0.01)
    assert split["evaluating"] == pytest.approx(epochs["eval_time_s"].sum(), abs=0.01)
    assert split["starting workers"] > 0 and split["preparing"] > 0
    # Recorded on CPUs, before the columns: no GPU peak, no floor.
    assert figures["peak_memory_mb"] is None and figures["memory_floor_mb"] is None
    epochs["peak_memory_mb"] = 300.0
    epochs.to_csv(folder / "epochs.csv", index=False)
    trials = pd.read_csv(folder / "trials.csv").assign(memory_floor_mb=120.5)
    trials.to_csv(folder / "trials.csv", index=False)
    figures = import_bench("gpu_check", monkeypatch).sweep_figures(folder)
    assert (figures["peak_memory_mb"], figures["memory_floor_mb"]) == (300.0, 120.5)


def test_gpu_check_reads_a_trial_that_failed_before_its_first_epoch(tmp_path, monkeypatch):
    """A review (2026-11-30): a 1-worker trial that fails before its first epoch ends
    (a capture fault, memory) leaves trials.csv and a header-only epochs.csv; reading
    them raised IndexError, and the check's later steps never ran."""
    import shutil
    folder = tmp_path / "sweep"
    shutil.copytree(REPO / "tests" / "data" / "exercises-quick-current", folder)
    trials = pd.read_csv(folder / "trials.csv")
    single = trials["trial_id"][trials["num_workers"] == 1].iloc[0]
    trials = trials.astype({"error": object})  # every trial of the recording finished
    trials.loc[trials["trial_id"] == single, ["status", "error"]] = ["error", "OutOfMemoryError"]
    trials.to_csv(folder / "trials.csv", index=False)
    epochs = pd.read_csv(folder / "epochs.csv")
    epochs[epochs["trial_id"] != single].to_csv(folder / "epochs.csv", index=False)
    check = import_bench("gpu_check", monkeypatch)
    assert check.sweep_figures(folder) == {"trials": len(trials), "status": "error",
                                           "error": "OutOfMemoryError"}
    (folder / "epochs.csv").write_text("")  # a sweep stopped before it wrote a row
    assert check.sweep_figures(folder) == {}


def test_gpu_check_on_a_machine_of_several_gpus_checks_the_first(monkeypatch, capsys):
    """A review (2026-11-29): the check is of one GPU (its main job names the 2-worker
    point as not run), so on a node of eight every step it starts sees one."""
    check = import_bench("gpu_check", monkeypatch)
    listed = {"CUDA_VISIBLE_DEVICES": "3,5,6"}
    assert check.one_gpu_only(listed) == (
        "gpu_check: 3 GPUs visible; the check is of one GPU, so every step sees the first "
        "only (CUDA_VISIBLE_DEVICES=3)")
    assert listed == {"CUDA_VISIBLE_DEVICES": "3"}
    assert check.one_gpu_only(listed) is None and listed == {"CUDA_VISIBLE_DEVICES": "3"}
    monkeypatch.setattr(check.torch.cuda, "device_count", lambda: 8)
    unset: dict = {}
    assert "8 GPUs visible" in check.one_gpu_only(unset)
    assert unset == {"CUDA_VISIBLE_DEVICES": "0"}
    monkeypatch.setattr(check.torch.cuda, "device_count", lambda: 1)
    assert check.one_gpu_only({}) is None


def test_gpu_check_reads_the_profiled_steps_kernels_or_host_ops_where_none_was_seen(
        tmp_path, monkeypatch):
    from orchestrator.report import profile
    check = import_bench("gpu_check", monkeypatch)
    rank = {"trial_id": "t1", "steps": 20, "step_ms": 10.0, "calls": 1.0, "trace": "x"}
    gpu = [{**rank, "rank": r, "device": f"cuda:{r}", "kernels": 212.0, "device_busy_ms": 6.1,
            "nccl_busy_ms": 0.0, "op": op, "self_cpu_ms": 0.0, "self_device_ms": ms}
           for r in (0, 1) for op, ms in [("sm90_xmma", 2.5), ("nchw2nhwc", 0.7),
                                          ("sgd_kernel", 0.3), ("fill", 0.1)]]
    pd.DataFrame(gpu, columns=profile.PROFILE_COLUMNS).to_csv(tmp_path / "profile.csv",
                                                              index=False)
    assert check.profile_figures(tmp_path, "t1") == {
        "device": "cuda:0", "steps": 20, "step_ms": 10.0, "kernels": 212.0,
        "device_busy_ms": 6.1,
        "top_ops": [["sm90_xmma", 2.5], ["nchw2nhwc", 0.7], ["sgd_kernel", 0.3]],
        "error": None}
    assert check.profile_figures(tmp_path, "t2") is None  # not profiled
    blind = [{**rank, "rank": 0, "device": "cuda:0", "op": "aten::mm", "self_cpu_ms": 4.0,
              "self_device_ms": 0.0, "error": "no kernel recorded on the device (...)"}]
    pd.DataFrame(blind, columns=profile.PROFILE_COLUMNS).to_csv(tmp_path / "profile.csv",
                                                                index=False)
    figures = check.profile_figures(tmp_path, "t1")
    assert figures["kernels"] is None and figures["device_busy_ms"] is None
    assert figures["top_ops"] == [["aten::mm", 4.0]]  # host ops, where kernels were not seen
    assert figures["error"].startswith("no kernel recorded")
