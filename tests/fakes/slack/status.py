"""`assistant.threads.setStatus`: the "is working…" line Slack shows under a thread.

Every call is kept with a sequence number so tests can assert the order of statuses and
that the last one cleared. Slack hides a status by itself when the app replies in the thread
or after two minutes without a message; `current` models both on the fake's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["STATUS_TIMEOUT_S", "StatusUpdate", "ThreadStatuses"]

STATUS_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class StatusUpdate:
    """One accepted `assistant.threads.setStatus` call."""

    seq: int
    channel_id: str
    thread_ts: str
    status: str  # "" clears
    loading_messages: tuple[str, ...]
    at: float  # the fake's clock


@dataclass
class ThreadStatuses:
    """Status updates per thread, in arrival order."""

    updates: list[StatusUpdate] = field(default_factory=list)

    def set(self, args: dict[str, Any], at: float) -> dict[str, Any]:
        """Validate and record one call; returns Slack's reply body."""
        channel_id, thread_ts = args.get("channel_id"), args.get("thread_ts")
        status = args.get("status")
        if not channel_id:
            return {"ok": False, "error": "channel_not_found"}
        if not thread_ts or status is None:
            return {"ok": False, "error": "invalid_arguments"}
        loading = args.get("loading_messages") or []
        if not isinstance(loading, list) or len(loading) > 10:
            return {"ok": False, "error": "invalid_arguments"}
        self.updates.append(
            StatusUpdate(
                seq=len(self.updates) + 1,
                channel_id=str(channel_id),
                thread_ts=str(thread_ts),
                status=str(status),
                loading_messages=tuple(str(m) for m in loading),
                at=at,
            )
        )
        return {"ok": True}

    def history(self, channel_id: str, thread_ts: str) -> list[StatusUpdate]:
        """Every status set on one thread, oldest first."""
        return [u for u in self.updates if u.channel_id == channel_id and u.thread_ts == thread_ts]

    def texts(self, channel_id: str, thread_ts: str) -> list[str]:
        """The status strings of one thread, oldest first ("" for a clear)."""
        return [u.status for u in self.history(channel_id, thread_ts)]

    def current(
        self, channel_id: str, thread_ts: str, *, now: float, last_reply_at: float | None
    ) -> str:
        """What Slack shows now: the last status, unless cleared, timed out, or followed by a
        reply from the app."""
        history = self.history(channel_id, thread_ts)
        if not history:
            return ""
        last = history[-1]
        if now - last.at >= STATUS_TIMEOUT_S:
            return ""
        if last_reply_at is not None and last_reply_at >= last.at:
            return ""
        return last.status
