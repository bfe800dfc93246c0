"""bench/root_vs_ring.py's predictions: the book's allreduce funnels 2(k-1) copies
through worker 0, one way after the other; a ring's workers move 2(k-1)/k each way."""

import importlib.util

import pytest

from helpers import REPO


def _bench():
    spec = importlib.util.spec_from_file_location("root_vs_ring", REPO / "bench" / "root_vs_ring.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tc_rates_are_read_in_bytes_per_second():
    bench = _bench()
    assert bench.rate_bytes_per_s("50mbit") == 6.25e6
    assert bench.rate_bytes_per_s("1gbit") == 1.25e8


@pytest.mark.parametrize("k", [2, 3, 4])
def test_root_moves_k_minus_1_copies_each_way_at_worker_0_and_takes_k_times_a_ring(k):
    n, rate = 1000, 1e6
    predicted = _bench().predicted(k, n, rate)
    root, ring = predicted["root"], predicted["bucketed"]
    assert (root["rank0_sent_bytes"], root["rank0_received_bytes"]) == ((k - 1) * n, (k - 1) * n)
    assert (root["other_sent_bytes"], root["other_received_bytes"]) == (n, n)
    assert ring["rank0_sent_bytes"] == ring["other_sent_bytes"] == pytest.approx(2 * (k - 1) / k * n)
    assert root["seconds"] == pytest.approx(2 * (k - 1) * n / rate)
    assert root["seconds"] / ring["seconds"] == pytest.approx(k)
    assert predicted["scratch"] == ring
