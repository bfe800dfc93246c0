"""bench/report.py: the newest record in full, and each machine's newest headline figures."""

import importlib.util

from helpers import REPO

_spec = importlib.util.spec_from_file_location("bench_report", REPO / "bench" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _record(machine: str, date: str, weak: float) -> dict:
    return {"benchmark": "scaling", "date": date, "machine": machine, "command": "python bench/scaling.py",
            "weak_speedup": weak, "strong_speedup": weak + 0.01}


def test_each_machine_shows_its_newest_record_and_the_newest_is_in_full():
    history = [_record("EPYC", "2026-11-22", 1.60), _record("EPYC", "2026-11-23", 1.70),
               _record("Xeon", "2026-11-24", 1.75)]
    doc = report.render([history], {"scaling": "A note."})
    assert "- machine: Xeon" in doc and "| weak_speedup | 1.75 |" in doc
    assert "| Xeon | 2026-11-24 | 1.75 | 1.76 | - | - |" in doc
    assert "| EPYC | 2026-11-23 | 1.7 | 1.71 | - | - |" in doc
    assert "1.6 |" not in doc  # an older record of a machine that has a newer one
    assert doc.index("| Xeon | 2026") < doc.index("| EPYC | 2026") < doc.index("A note.")


def test_machines_are_ordered_by_their_newest_record():
    history = [_record("EPYC", "2026-11-22", 1.60), _record("Xeon", "2026-11-23", 1.75),
               _record("EPYC", "2026-11-24", 1.70)]
    doc = report.render([history], {})
    assert doc.index("| EPYC | 2026-11-24") < doc.index("| Xeon | 2026-11-23")


def test_one_machine_needs_no_comparison():
    doc = report.render([[_record("EPYC", "2026-11-23", 1.70)]], {})
    assert "Newest record from each machine" not in doc


def _steps(sharded_sent_mb: float, sharded_step_ms: float) -> dict:
    def figures(transport, comm_ms, sent_mb, step_ms, state_mb):
        return {"transport": transport, "comm_ms": comm_ms, "sent_MB": sent_mb,
                "sent_in_synchronize_MB": sent_mb * 2 / 3, "optimizer_step_ms": step_ms,
                "params_MB": 44.7, "optimizer_state_MB": state_mb}
    return {"bucketed": figures("shared memory", 11.0, 0.0, 20.0, 44.7),
            "bucketed_gloo": figures("gloo", 23.0, 44.7, 20.0, 44.7),
            "ddp": figures("gloo", 30.0, 44.7, 20.0, 44.7),
            "sharded": figures("gloo", 35.0, sharded_sent_mb, sharded_step_ms, 22.35)}


def test_the_sharded_answer_is_written_from_the_record():
    record = {"benchmark": "sync_strategies", "date": "2026-11-24", "machine": "2 cores, EPYC",
              "command": "python bench/sync_strategies.py", "num_workers": 2,
              "resnet18": {"grad_MB": 44.7, "steps": _steps(67.05, 10.0)}}
    doc = report.render([[record]], {})
    assert "| sharded | gloo | 35 | 67.05 | 44.7 | 10 | 44.7 | 22.35 |" in doc
    assert "| resnet18 | grad_MB 44.7 |" in doc  # the steps have their own table
    assert "the update took 10 ms per worker against 20 ms for the whole model (0.50x)" in doc
    assert "held 67.1 MB against 89.4 MB (0.75x)" in doc
    # Where the numbers say it is not more efficient, the paragraph says so.
    assert "it sends 1.50x the bytes of one allreduce, its reduce-scatter alone writing 1.00 " \
           "of the gradients' 44.7 MB where a ring's would write (k-1)/k = 0.50" in doc
    assert "communication is 3.18x that of `bucketed`" in doc
    assert "(the fastest, `bucketed` over shared memory, 11 ms)" in doc
    assert "halved update is not faster" not in doc
    slow_update = {**record, "resnet18": {"grad_MB": 44.7, "steps": _steps(44.7, 19.0)}}
    doc = report.render([[slow_update]], {})
    assert "halved update is not faster (0.95x)" in doc and "the bytes of one allreduce" not in doc


def test_notes_without_a_benchmark_come_after_the_benchmarks_under_their_title():
    doc = report.render([[_record("EPYC", "2026-11-23", 1.70)]],
                        {"scaling": "A note.", "end_to_end": "4 min 2 s."})
    assert doc.index("A note.") < doc.index("## End-to-end runs (history)\n\n4 min 2 s.")
    assert "End-to-end" not in report.render([[_record("EPYC", "2026-11-23", 1.70)]], {})


def test_every_held_out_run_gives_its_error_per_strategy_and_k():
    def point(error: float) -> dict:
        return {"measured_epoch_s": 4.0, "predicted_epoch_s": 4.0 * (1 + error), "error": error}
    record = {"benchmark": "scaling_held_out", "date": "2026-11-25", "machine": "Xeon",
              "command": "python bench/scaling_held_out.py", "commit": "abc1234",
              "cluster": "head (0 CPUs) + 4 nodes x 1 CPU, netns, links 50mbit",
              "points": {"bucketed 2w (fitted k)": point(-0.007),
                         "root 2w (fitted k)": point(0.012),
                         "bucketed 3w (held out)": point(-0.103),
                         "root 3w (held out)": point(0.009),
                         "bucketed 4w (held out)": point(-0.121)}}
    doc = report.render([[record]], {})
    assert "- commit: abc1234" in doc and "| commit |" not in doc
    assert "| 2026-11-25 | Xeon | 50mbit | bucketed | -0.7% | -10.3% | -12.1% |" in doc
    assert "| 2026-11-25 | Xeon | 50mbit | root | +1.2% | +0.9% | - |" in doc


def test_every_scaling_model_validation_is_a_row_of_its_own_processor():
    def record(machine: str, sweep: str, error: float) -> dict:
        return {"benchmark": "scaling_model", "date": "2026-11-25", "machine": machine,
                "command": "python bench/scaling_model.py", "sweep": sweep, "trials": 2,
                "measured_points": 1, "max_abs_error": error, "target_met": error <= 0.15}
    doc = report.render([[record("2 cores, X, torch's AVX512 kernels", "qs", 0.012),
                          record("2 cores, X, torch's AVX2 kernels", "qs-avx2", 0.014)]], {})
    assert "| 2026-11-25 | 2 cores, X, torch's AVX512 kernels | `qs` | 2 | 1 | 1.2% | True |" in doc
    assert "| 2026-11-25 | 2 cores, X, torch's AVX2 kernels | `qs-avx2` | 2 | 1 | 1.4% | True |" in doc


def test_a_row_that_could_not_be_measured_keeps_its_place_in_the_table():
    record = {"rows": [{"model": "lstm", "precision": "bf16", "error": "RuntimeError: no"},
                       {"model": "lstm", "precision": "fp32", "floor_over_peak": 0.5}]}
    assert report.rows_section(record) == [
        "| model | precision | error | floor_over_peak |", "| --- | --- | --- | --- |",
        "| lstm | bf16 | RuntimeError: no |  |", "| lstm | fp32 |  | 0.5 |", ""]
