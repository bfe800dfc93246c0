"""Ctrl-C in Ray's shutdown after a job: held, and the job's outcome still printed
(interrupts.first_sigint_held, jobs.shut_down). The handler a fit leaves behind is
tested where a fit runs: tests/cluster/test_trial.py."""

import os
import signal
import threading
import time

import pytest

from orchestrator.driver import interrupts, jobs


@pytest.fixture
def python_handles_sigint():
    """Python's own SIGINT handler for the test, whatever the test run inherited
    (a run started in the background of a shell inherits SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_self() -> None:
    """SIGINT to this process, as a Ctrl-C sends it; returns once it was handled."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # Python runs handlers between bytecodes of the main thread


def test_a_first_ctrl_c_is_held_and_a_second_raises(python_handles_sigint):
    before = signal.getsignal(signal.SIGINT)
    with interrupts.first_sigint_held() as came:
        _interrupt_self()
        assert came == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):
            _interrupt_self()
    assert signal.getsignal(signal.SIGINT) is before
    with interrupts.first_sigint_held() as came:
        pass
    assert came == [] and signal.getsignal(signal.SIGINT) is before


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a shell
    try:
        with interrupts.first_sigint_held() as came:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            _interrupt_self()
        assert came == [] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_off_the_main_thread_nothing_changes():
    seen = []

    def body():
        with interrupts.first_sigint_held() as came:
            seen.append((came, signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [([], signal.getsignal(signal.SIGINT))]


class _Ray:
    """What jobs.shut_down calls of ray: its shutdown, here Ctrl-C'd halfway."""

    def __init__(self):
        self.shut = False

    def shutdown(self):
        _interrupt_self()
        self.shut = True


def test_a_ctrl_c_in_rays_shutdown_lets_it_end_and_says_so(python_handles_sigint, capsys):
    ray = _Ray()
    jobs.shut_down(ray)  # no KeyboardInterrupt: the job's outcome is returned whole
    assert ray.shut
    assert capsys.readouterr().err == jobs.HELD_CTRL_C_LINE + "\n"
