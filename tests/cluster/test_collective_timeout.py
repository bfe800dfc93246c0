"""--collective-timeout reaches the process group Ray Train sets up: a rank that
stalls in a real 2-worker Ray Train run fails it at that timeout, in one line
that says what to look at (failures.failure_text)."""

import dataclasses
import time

import pytest
from ray.train import FailureConfig, RunConfig, TrainingFailedError

from orchestrator.config.options import TrainConfig
from orchestrator.driver.failures import (COLLECTIVE_TIMEOUT_ADVICE, TRIAL, collectives_failed,
                                          failure_text)
from orchestrator.driver.trial import _fit, _trainer
from helpers import hang_limit

TIMEOUT_S = 3
STALL_S = 12  # past the timeout, short enough not to hold the worker group's shutdown long


def _stalling_loop():
    """Rank 1 stalls between two allreduces; made here so that Ray ships it by value."""
    def loop(loop_config: dict) -> None:
        import time

        import torch
        from ray import train

        from orchestrator.training.sync.collectives import allreduce_
        allreduce_(torch.ones(4))  # both joined and in step
        if train.get_context().get_world_rank() == 1:
            time.sleep(loop_config["stall_s"])
        allreduce_(torch.ones(4))
    return loop


@pytest.mark.reliability(
    fault="a rank stalls in a collective past --collective-timeout (3 s) in a 2-worker run",
    lost="the run: it fails at the timeout, not Ray Train's default 30 minutes later, in one "
         "line that names the timeout and the network interface settings to look at")
def test_a_stalled_rank_fails_the_run_at_the_collective_timeout(ray_session, tmp_path):
    config = dataclasses.replace(TrainConfig(), num_workers=2, collective_timeout=TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(TrainingFailedError) as failed:
        _fit(_trainer(_stalling_loop(), config, {"stall_s": STALL_S},
                      RunConfig(name="stalled", storage_path=str(tmp_path),
                                failure_config=FailureConfig(max_failures=0))))
    assert time.monotonic() - started < hang_limit(120)
    text = failure_text(failed.value, TRIAL)
    assert "\n" not in text
    # gloo's own words, with the option's timeout in them: it reached the process group.
    assert "rank 0: RuntimeError: " in text and \
        f"Timed out waiting {TIMEOUT_S * 1000}ms for recv operation to complete" in text, text
    assert text.endswith(f" ({COLLECTIVE_TIMEOUT_ADVICE})"), text
    # In a sweep's calibration, this stops the sweep before its trials (calibrate.py).
    assert collectives_failed(failed.value)
