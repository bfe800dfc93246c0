"""Ctrl-C in the driver, before, during and after the fits it runs.

Ray Train's fit, called from a main thread (train.py's run, a sweep's
calibration), installs a SIGINT handler that aborts that fit's run; Tune's fit
installs one that ends its experiment. Neither is taken away when its fit
returns. Left in place, the Ctrl-Cs that follow went to a run that had ended
(measured, Ray 2.60): after Train's fit the first two were swallowed and the
third exited with status 0; after Tune's, the first set an event that nothing
reads. `sigint_handler_kept` puts the driver's own handler back after each fit,
so that a Ctrl-C there is Python's KeyboardInterrupt, which the jobs turn into
a line and exit 130 as they do a Ctrl-C inside a fit.

Once a job has ended, Ray's shutdown (seconds) is all that is left: a first
Ctrl-C there is held until it ends (`first_sigint_held`), so that the job's
outcome, its book's line or its report's files, is still printed; before, it
was a KeyboardInterrupt that replaced the outcome with `interrupted (Ctrl-C)`.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator


def _own_sigint_handler():
    """This process's SIGINT handler where this thread may replace it; None off a
    main thread (no handler can be installed there) or where it was installed
    outside Python (not ours to replace)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGINT)


@contextlib.contextmanager
def sigint_handler_kept() -> Iterator[None]:
    """The SIGINT handler of the block's start is the one after it, whatever the
    block installed. Off a main thread (a Tune trial's fit) it does nothing:
    there no handler can be installed, and Ray Train installs none."""
    handler = _own_sigint_handler()
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def first_sigint_held() -> Iterator[list[int]]:
    """A first SIGINT in the block is held, not raised: the block is a bounded end
    (Ray's shutdown after a job) whose job's outcome is worth printing. The list
    yielded holds the signal once one came; a second one is handled as before the
    block (a KeyboardInterrupt). Off a main thread, or where SIGINT is ignored or
    handled outside Python, nothing changes."""
    came: list[int] = []
    handler = _own_sigint_handler()
    if handler in (None, signal.SIG_IGN):
        yield came
        return

    def hold(signum, frame):
        came.append(signum)
        signal.signal(signal.SIGINT, handler)

    signal.signal(signal.SIGINT, hold)
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, handler)
