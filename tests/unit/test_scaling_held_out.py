"""bench/scaling_held_out.py's calibration for the fit: the fitting sweep's link
samples and probe, the held-out sweep's probe only where the fit has none."""

import importlib.util

import pytest

from helpers import REPO


def _bench():
    spec = importlib.util.spec_from_file_location("scaling_held_out",
                                                  REPO / "bench" / "scaling_held_out.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _probe(**seconds) -> list[dict]:
    return [{"num_workers": int(k[1:]), "batch_per_worker": 64, "seconds_per_example": s}
            for k, s in seconds.items()]


def test_the_held_out_probe_fills_only_counts_the_fit_lacks_scaled_to_its_one_worker():
    fit = {"allreduce": [{"transport": "gloo", "num_workers": 2, "bytes": 1024, "seconds": 1e-3}],
           "compute": _probe(k1=1.0, k2=1.2), "gradient_bytes": ["fit's"]}
    held_out = {"allreduce": [{"transport": "gloo", "num_workers": 4, "bytes": 1024,
                               "seconds": 9.0}],
                "compute": _probe(k1=2.0, k3=3.0, k4=4.0), "gradient_bytes": ["other"]}
    merged = _bench().fit_calibration(fit, held_out)
    assert merged["allreduce"] == fit["allreduce"] and merged["gradient_bytes"] == ["fit's"]
    assert [(c["num_workers"], c["seconds_per_example"]) for c in merged["compute"]] == [
        (1, 1.0), (2, 1.2), (3, pytest.approx(1.5)), (4, pytest.approx(2.0))]
