"""How long a run may go on: ``RunOptions.terminate`` and the time bound ``run_timeout_s``.

A run's stop condition is one object that the executors poll before every step and the
control-flow kernels at every iteration (``is_set()``, as on the ``threading.Event`` that
``RunOptions.terminate`` sets). :class:`RunBound` adds a deadline to that flag when a run has
a time bound: the run config entry ``epoxy.run_timeout_s`` for one run, or
``SessionOptions.run_timeout_s`` (config entry ``epoxy.run_timeout_s``) for every run of a
session. Either way the run ends with :class:`~epoxy.errors.RunTerminatedError` saying where
it was, and the session stays usable.

The bound is checked between steps and loop iterations, not inside a kernel: one long kernel
call finishes before the run stops. There is no default bound (onnxruntime has none, and a
default would stop legitimately long models); ``max_loop_iterations`` still caps loops.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from ..errors import InvalidArgumentError, RunTerminatedError

#: the config key (session and run) and attribute name of the time bound
TIMEOUT_KEY = "epoxy.run_timeout_s"


def timeout_seconds(field: str, value: Any) -> float | None:
    """A time bound as a positive, finite float of seconds (``None``: no bound); a string
    is parsed, as config entries arrive; anything else is an ``InvalidArgumentError``."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise InvalidArgumentError(f"{field} must be a positive number of seconds, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{field} must be a positive number of seconds (or None: no bound), got {value!r}")
    return float(value)


class RunBound:
    """The stop condition of one run with a time bound: set once ``flag`` (the RunOptions'
    terminate event, if any) is set or the deadline has passed."""

    __slots__ = ("flag", "timeout_s", "source", "_start", "_deadline")

    def __init__(self, flag: threading.Event | None, timeout_s: float, source: str) -> None:
        self.flag = flag
        self.timeout_s = timeout_s
        self.source = source
        self._start = time.monotonic()
        self._deadline = self._start + timeout_s

    def is_set(self) -> bool:
        return time.monotonic() >= self._deadline or (self.flag is not None and self.flag.is_set())

    def error(self, where: str) -> RunTerminatedError:
        """The error to stop with, ``where`` saying at which step or iteration."""
        if self.flag is not None and self.flag.is_set():
            return terminated(where)
        elapsed = time.monotonic() - self._start
        return RunTerminatedError(
            f"run stopped {where}: it ran {elapsed:.3f} s, past its time bound {TIMEOUT_KEY}={self.timeout_s:g} s "
            f"(set by {self.source})")


def terminated(where: str) -> RunTerminatedError:
    return RunTerminatedError(f"run terminated (RunOptions.terminate was set) {where}")


def run_stop(flag: threading.Event | None, timeout_s: float | None, source: str) -> Any:
    """The stop condition of one run: ``flag`` itself (or None) without a time bound, so
    unbounded runs pay nothing more than before."""
    return flag if timeout_s is None else RunBound(flag, timeout_s, source)


def stop_error(stop: Any, where: str) -> RunTerminatedError:
    """Why a run whose stop condition ``stop`` is set ends, ``where`` (``before node 'x'
    (Add)``, ``in Loop 'l' iteration 3``) saying where it was."""
    error = getattr(stop, "error", None)
    return error(where) if error is not None else terminated(where)
