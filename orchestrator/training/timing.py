"""Seconds on a device, timed without making the device wait.

On a CPU the clock is read at each `start`/`stop`. A GPU runs what the host
queued later: reading the host's clock around GPU work would make every
step wait for the GPU and stall its launch queue, so CUDA events are
recorded in the queue instead and read once, when `seconds` is asked for
(once an epoch; bench/notes/gpu.md).

`slowdown` emulates a slower device (13.6, exercise 2: a CPU beside GPUs):
each timed span is stretched to that many times its length, and the stretch
counts as the device's time. On a CPU the worker stays busy for it, as a
slower CPU would compute that long on its core: a sleep would hand the core to
a worker beside it, and make the even split look better than a real straggler
allows. On a GPU the host waits idle for it, as it would for a slower GPU.
"""

import time

import torch


class DeviceTimer:
    """Seconds summed from `start`/`stop` pairs, each less what `stop` is told to leave out."""

    def __init__(self, device: torch.device, *, slowdown: float = 1.0):
        self.on_gpu = device.type == "cuda"
        self.slowdown = slowdown
        self._seconds = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event, float]] = []

    def start(self) -> "float | torch.cuda.Event":
        """A mark, on the current CUDA stream on a GPU."""
        if self.on_gpu:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started: "float | torch.cuda.Event", *, minus_s: float = 0.0,
             at: "torch.cuda.Event | None" = None) -> None:
        """Adds the time since `started` less `minus_s`; on a GPU, once the
        current stream gets here, or up to `at`, a mark recorded earlier (where the
        stream has since been made to wait for something not this span's)."""
        if self.on_gpu:
            stopped = at
            if stopped is None:
                stopped = torch.cuda.Event(enable_timing=True)
                stopped.record()
            if self.slowdown > 1:  # the emulation has to wait for the GPU to know the span
                stopped.synchronize()
                minus_s -= self._stretch(started.elapsed_time(stopped) / 1000 - minus_s)
            self._events.append((started, stopped, minus_s))
        else:
            seconds = time.perf_counter() - started - minus_s
            self._seconds += seconds + (self._stretch(seconds) if self.slowdown > 1 else 0.0)

    def _stretch(self, seconds: float) -> float:
        """Spends the extra time a device `slowdown` times slower would take (busy on a
        CPU, asleep beside a GPU); returns it."""
        extra_s = (self.slowdown - 1) * max(seconds, 0.0)
        if self.on_gpu:
            time.sleep(extra_s)
        else:
            deadline = time.perf_counter() + extra_s
            while time.perf_counter() < deadline:
                pass
        return extra_s

    @property
    def seconds(self) -> float:
        if self._events:
            # The one wait for the GPU; each stop, since ddp's may be on different streams.
            for _, stop, _ in self._events:
                stop.synchronize()
            self._seconds += sum(start.elapsed_time(stop) / 1000 - minus_s
                                 for start, stop, minus_s in self._events)
            self._events.clear()
        return self._seconds

    def reset(self, seconds: float = 0.0) -> None:
        self._seconds, self._events = seconds, []

    def take(self) -> float:
        """The seconds timed since the last `take` (or `reset`)."""
        seconds = self.seconds
        self.reset()
        return seconds
