"""bench/gpu_check.py's own flow, rehearsed on a CPU: a lent GPU gives 15 minutes,
and an error in how the check runs its steps or reads their results would spend
them. CUDA is faked where the check asks for it; its steps run for real, made
small: the main job (sweep.py, the book's 13.5 preset, its own embedded Ray), the
torchrun baseline (bench/torchrun_ddp.py on the CPU, LeNet), and the loop alone
stood in for by a Python that prints what it would (it trains ResNet-18 on CUDA).
The record, its figures and verdicts, the record rewritten after each step (a
call stopped at its limit keeps them), and the files a lent machine sends back
are checked.
A rehearsal found the check's timeout leaving torchrun's worker running
(tests/processes/test_gpu_bench_commands.py has that case)."""

import json
import sys

import torch

from helpers import REPO, SMALL, hang_limit, import_bench


def test_the_check_runs_its_steps_and_records_their_figures(tmp_path, monkeypatch):
    check = import_bench("gpu_check", monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "rehearsal on a CPU")
    for name, limit_s in check.STEP_LIMITS_S.items():
        monkeypatch.setitem(check.STEP_LIMITS_S, name, hang_limit(limit_s))
    standing_in = {"epoch_s": 1.0, "test_acc": 0.5, "memory_format": "nchw",
                   "precision": "bf16", "step_graph": "off"}
    real_run, argvs, before_torchrun = check.Steps.run, {}, []

    def small_run(self, name, argv, log_name=None):
        if name == "main_job":  # two epochs: the figures read the epochs after the first
            argv = [*argv, *SMALL, "--epochs", "2"]
        if name == "torchrun":  # the check's command, on the CPU, for LeNet
            argv = list(argv)
            argv[argv.index("--device") + 1] = "cpu"
            argv[argv.index("--model") + 1] = "lenet"
            argv += ["--train-limit", "512", "--batch-size", "64", "--test-limit", "500"]
            # What a call stopped during this step would send back.
            before_torchrun.append(json.loads((out / "gpu_check.jsonl").read_text()))
        if name == "loop_alone":  # its own Python, its line printed as loop_alone would
            argv = [sys.executable, "-c", f"print({check.LOOP_ALONE_LINE!r} + "
                                          f"{json.dumps(json.dumps(standing_in))})"]
        argvs[name] = argv
        return real_run(self, name, argv, log_name)
    monkeypatch.setattr(check.Steps, "run", small_run)
    results = {path.name: path.read_bytes() for path in (REPO / "bench" / "results").iterdir()}
    out = tmp_path / "out"

    code = check.main(["--out", str(out), "--steps", "main_job,loop_alone,torchrun"])

    logs = {path.name: path.read_text() for path in out.glob("*.log")}
    assert code == 0, {name: text[-2000:] for name, text in logs.items()}
    (record,) = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]
    assert {name: step["ran"] for name, step in record["steps"].items()} == {
        "tests_cuda_graph": False, "tests_gpu": False, "main_job": True, "d2l_13_6": False,
        "loop_alone": True, "torchrun": True}
    assert "partial" not in record and record["loop_alone"] == standing_in
    (partial,) = before_torchrun
    assert partial["partial"] == "written after the loop_alone step, the check still running"
    assert partial["main_job"] == record["main_job"] and partial["loop_alone"] == standing_in
    main_job = record["main_job"]
    assert main_job["epochs_run"] == 2 and main_job["trials"] == 2  # this CPU holds both
    # --profile-steps: the 1-worker trial's first rank, on this CPU its host ops alone.
    profiled = main_job["profile"]
    assert profiled["device"] == "cpu" and profiled["steps"] >= 1 and profiled["step_ms"] > 0
    assert profiled["kernels"] is None and len(profiled["top_ops"]) == 3
    assert profiled["error"] is None
    split = main_job["time_split_s"]
    assert split["trials_s"] > split["training"] > 0 and split["calibration_s"] > 0
    assert record["torchrun"]["epochs_run"] == check.TORCHRUN_EPOCHS
    assert argvs["torchrun"][argvs["torchrun"].index("--memory-format") + 1] == "channels-last"
    # Only d2l-13.6 measures ResNet-18: those verdicts wait for it; LeNet's is judged.
    verdicts = record["target_met"]
    assert verdicts["ray_overhead"] == verdicts["ray_vs_torchrun"] == "not measured"
    assert verdicts["lenet_epoch_s"].startswith(("met", "MISSED"))
    assert verdicts["check_s"].startswith("not measured: not every step ran")
    # What a lent machine sends back: at most 8 files; bench/results left alone.
    assert sorted(path.name for path in out.iterdir()) == [
        "gpu_check.jsonl", "loop_alone.log", "main_job.log", "main_job_report.md",
        "torchrun.log"]
    assert {path.name: path.read_bytes()
            for path in (REPO / "bench" / "results").iterdir()} == results
