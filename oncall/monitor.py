"""The model-free watcher of one round (SPEC §9: the monitor without model calls).

The engine polls the machine on its interval and hands `RoundWatch.observe` the new log
bytes, the job's status and a clock value; the watch parses measurements and says whether
to wake the agent early. It never sleeps, never reads a clock and never calls a model, so a
waiting campaign costs no model calls and the tests drive it with a fake clock.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

from oncall.metrics import MetricReader, ParsedValue
from oncall.model import CampaignSpec, JobStatus, WakeReason

STATE_VERSION = 1


@dataclass(frozen=True)
class Observation:
    """What one poll found: the new values, and at most one early-wake reason."""

    values: tuple[ParsedValue, ...]
    wake: WakeReason | None = None
    detail: str = ""  # one sentence saying why, for the wake record and the thread


def _fmt(value: float) -> str:
    return f"{value:.6g}"


class RoundWatch:
    """Watches one round: parses its output, detects finish, death, divergence and stalls.

    Wake priority when several hold at once: finished > died > vanished > diverged > stalled.
    `finished`/`died`/`vanished` are reported on every observation after the job ends (the
    job's status is their record); `diverged` is reported once per round (on the first bad
    value) and `stalled` once per silence (re-armed by new output), so the engine persists
    `state()` together with acting on the wake it got.
    """

    def __init__(self, spec: CampaignSpec, baseline: float | None, started_at: float) -> None:
        self._spec = spec
        self._reader = MetricReader(spec.metric)
        self._offset = 0
        self._started_at = started_at
        self._last_output_at = started_at
        self._baseline = baseline
        # The divergence reference: the baseline, else the round's first finite value.
        self._reference = baseline
        self._diverged_reported = False
        self._stall_reported = False

    @property
    def offset(self) -> int:
        """Log bytes consumed so far: what to ask the machine for output since."""
        return self._offset

    @property
    def last_output_at(self) -> float:
        """Clock value of the last poll that brought new output (the start before any)."""
        return self._last_output_at

    @property
    def reference(self) -> float | None:
        """The value divergence is measured against (None until there is one)."""
        return self._reference

    def observe(self, now: float, new_output: bytes, status: JobStatus) -> Observation:
        """Feed the bytes read since `offset` and the job's status at clock `now`.

        A job in state "unknown" (the machine could not say) is treated as running; an
        exit without a code counts as a death. At exit the unterminated last line is parsed.
        """
        values = self._reader.feed(new_output) if new_output else []
        if new_output:
            self._offset += len(new_output)
            self._last_output_at = now
            self._stall_reported = False
        ended = status.state in ("exited", "vanished")
        if ended:
            values += self._reader.flush()
        diverged = self._divergence(values)
        wake, detail = self._ended(status)
        if wake is None and diverged is not None and not self._diverged_reported:
            self._diverged_reported = True
            wake, detail = "diverged", diverged
        if wake is None and not ended:
            wake, detail = self._stall(now)
        return Observation(tuple(values), wake, detail)

    def _ended(self, status: JobStatus) -> tuple[WakeReason | None, str]:
        if status.state == "exited" and status.exit_code == 0:
            return "finished", "the round finished (exit code 0)"
        if status.state == "exited":
            code = "no exit code" if status.exit_code is None else f"exit code {status.exit_code}"
            return "died", f"the round's process died ({code})"
        if status.state == "vanished":
            detail = f": {status.detail}" if status.detail else ""
            return "vanished", f"the round's process vanished without an exit code{detail}"
        return None, ""

    def _divergence(self, values: list[ParsedValue]) -> str | None:
        """The first divergent value among `values` as a sentence; sets the reference."""
        found: str | None = None
        for parsed in values:
            reason = self._check_value(parsed.value)
            if reason is not None and found is None:
                found = reason
        return found

    def _check_value(self, value: float) -> str | None:
        name = self._spec.metric.name
        if not math.isfinite(value):
            return f"{name} became {_fmt(value)}"
        if self._reference is None:
            self._reference = value
            return None
        margin = self._spec.divergence_margin
        if margin is None:
            return None
        worse = (
            value - self._reference if self._spec.direction == "min" else self._reference - value
        )
        if worse <= margin:
            return None
        what = "the baseline" if self._baseline is not None else "the round's first value"
        return (
            f"{name}={_fmt(value)} is worse than {what} {_fmt(self._reference)} "
            f"by more than the margin {_fmt(margin)}"
        )

    def _stall(self, now: float) -> tuple[WakeReason | None, str]:
        silent = now - self._last_output_at
        if self._stall_reported or silent < self._spec.stall_seconds:
            return None, ""
        self._stall_reported = True
        limit = self._spec.stall_seconds
        return "stalled", f"no new output for {silent:.0f} s (the stall limit is {limit:.0f} s)"

    def state(self) -> dict[str, Any]:
        """Everything needed to resume after a restart, as JSON-serialisable values."""
        return {
            "version": STATE_VERSION,
            "offset": self._offset,
            "started_at": self._started_at,
            "last_output_at": self._last_output_at,
            "baseline": self._baseline,
            "reference": self._reference,
            "pending": base64.b64encode(self._reader.pending).decode("ascii"),
            "truncated": self._reader.truncated,
            "dropping": self._reader.dropping,
            "diverged_reported": self._diverged_reported,
            "stall_reported": self._stall_reported,
        }

    @classmethod
    def restore(cls, spec: CampaignSpec, state: dict[str, Any]) -> RoundWatch:
        """A watch that continues where `state()` left off; ValueError if it is malformed."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown round-watch state version {state.get('version')!r}")
        try:
            watch = cls(spec, _opt_float(state["baseline"]), float(state["started_at"]))
            watch._offset = int(state["offset"])
            watch._last_output_at = float(state["last_output_at"])
            watch._reference = _opt_float(state["reference"])
            watch._reader = MetricReader(
                spec.metric,
                pending=base64.b64decode(state["pending"], validate=True),
                truncated=bool(state["truncated"]),
                dropping=bool(state["dropping"]),
            )
            watch._diverged_reported = bool(state["diverged_reported"])
            watch._stall_reported = bool(state["stall_reported"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed round-watch state ({exc!r})") from None
        return watch


def _opt_float(raw: object) -> float | None:
    if raw is None:
        return None
    if not isinstance(raw, int | float | str):
        raise TypeError(f"expected a number, got {raw!r}")
    return float(raw)
