"""`--memory-format auto` on two gloo processes (no Ray): the workers agree on one
layout, the one with the smaller sum of their timings, even where each alone
would take the other, and whatever each node's cache held."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import shared_dict
from orchestrator.config.options import TrainConfig
from orchestrator.driver.cluster import free_local_port
from orchestrator.training import layout

# Seconds per step as each rank measures them: rank 0 finds NCHW faster by
# 0.20 s, rank 1 channels-last by 0.15 s; summed, NCHW is faster.
STEP_S = [{"nchw": 0.10, "channels-last": 0.30}, {"nchw": 0.25, "channels-last": 0.10}]


def _body(rank: int, port: int, cache_dir, cached_rank, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        # A node of its own per rank: the rank `cached_rank` finds its timings
        # in its node's cache and measures nothing.
        cache = cache_dir / f"node{rank}.json"
        calls = []

        def measure():
            calls.append(rank)
            return STEP_S[rank]
        config, device = TrainConfig(num_workers=2), torch.device("cpu")
        if rank == cached_rank:
            layout.cached_step_s(cache, "sweep", layout.cache_key(config, device),
                                 lambda: STEP_S[rank])
        results[rank] = (layout.choose(config, device, measure, scope="sweep", cache=cache),
                         len(calls))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("cached_rank", [None, 1], ids=["both-measure", "rank1-cached"])
def test_workers_take_the_layout_of_the_smaller_sum(tmp_path, cached_rank):
    with shared_dict() as results:
        mp.spawn(_body, args=(free_local_port(), tmp_path, cached_rank, results), nprocs=2)
        results = dict(results)
    expected = {"memory_format": "nchw", "layout_nchw_step_s": pytest.approx(0.175),
                "layout_channels_last_step_s": pytest.approx(0.20)}
    assert results[0][0] == expected and results[1][0] == expected
    assert [results[rank][1] for rank in (0, 1)] == [1, 0 if cached_rank == 1 else 1]
