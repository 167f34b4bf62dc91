"""A liveness bound for code that must return at all: the regular expressions a person supplies
(`^(a+)+$` on 16,000 characters backtracks for longer than the universe has existed under
Python's `re`, and returns in well under a second under RE2).

The bound is no performance threshold: it only turns "never returns" into a failure. SIGALRM
interrupts even a match in progress, since Python's `re` checks for signals as it runs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

LIVENESS_SECONDS = 60.0


class StillRunning(AssertionError):
    """What the bound raises in the code that overran it."""


@contextmanager
def returns_within(seconds: float = LIVENESS_SECONDS) -> Iterator[None]:
    """Fail the block with StillRunning if it has not returned after `seconds`."""
    assert threading.current_thread() is threading.main_thread(), "signals reach the main thread"

    def overran(_signum: int, _frame: FrameType | None) -> None:
        raise StillRunning(f"still running after {seconds:g} s (it should return at all)")

    previous = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
