"""How long to wait before each attempt to reconnect a lost server: capped exponential delays.

A small class rather than a retry library: neither tenacity nor backoff is a dependency, and
the reconnect loop must wait on the manager's own close event, which a decorator-style retry
cannot see. No jitter: one bot reconnects a handful of servers, there is no herd to spread."""

from __future__ import annotations

from dataclasses import dataclass

# Beyond this exponent every delay is the cap anyway (and 2.0 ** 2000 overflows).
_MAX_EXPONENT = 64


@dataclass(frozen=True)
class Backoff:
    """Delays `first`, `first * factor`, ... for attempts 1, 2, ..., never above `cap`."""

    first: float = 1.0
    cap: float = 60.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1:
            raise ValueError(
                f"backoff needs 0 < first <= cap and factor >= 1 (got first={self.first},"
                f" cap={self.cap}, factor={self.factor})"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt `attempt` (1-based)."""
        exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
        return min(self.cap, self.first * self.factor**exponent)
