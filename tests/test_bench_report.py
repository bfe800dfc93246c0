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
