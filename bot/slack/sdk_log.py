"""slack_sdk's logger, minus tracebacks and repeats while Slack is unreachable."""

from __future__ import annotations

import logging

from bot.slack.config import UNREACHABLE, clock_in, unreachable_reason

# slack_sdk notices repeated on every retry while Slack is unreachable: our WARNING says it.
_SDK_RETRY_NOISE = (
    "A retry handler found",
    "The session (",  # "... seems to be already closed. Reconnecting..."
    "Failed to receive or enqueue a message: Client",
)
_SDK_RECONNECT_FAILED = "Failed to check the current session"


class SdkLog(logging.Logger):
    """slack_sdk's logger, minus tracebacks and repeats for an unreachable Slack.

    The Socket Mode client logs a full traceback on every failed connect and an error or
    two on every failed reconnect (each ping interval); this makes each attempt one WARNING
    with the next retry time and demotes the per-retry notices to DEBUG. A child of `parent`.
    """

    def __init__(self, parent: logging.Logger, retry_in: float) -> None:
        # Not registered with logging's manager: one per adapter, dropped with it.
        super().__init__(f"{parent.name}.sdk")
        self.parent = parent
        self._retry_in = retry_in

    def _retry_line(self, what: str) -> str:
        return f"slack: {what}; retrying at {clock_in(self._retry_in)} (in {self._retry_in:g}s)"

    def handle(self, record: logging.LogRecord) -> None:
        """Rewrite the records described above, then hand them on like any logger."""
        message = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, UNREACHABLE):
            record.exc_info, record.exc_text = None, None
            if message.startswith("Failed to connect"):
                record.levelno, record.levelname = logging.WARNING, "WARNING"
                message = self._retry_line(
                    f"Socket Mode cannot connect ({unreachable_reason(exc)})"
                )
            else:
                message = f"{message} ({unreachable_reason(exc)})"
            record.msg, record.args = message, ()
        elif message.startswith(_SDK_RECONNECT_FAILED):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            detail = message.partition("reconnect to the server ")[2] or message
            record.msg = self._retry_line(f"Socket Mode cannot reconnect {detail}")
            record.args = ()
        elif record.levelno <= logging.ERROR and message.startswith(_SDK_RETRY_NOISE):
            if not self.isEnabledFor(logging.DEBUG):
                return
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        super().handle(record)
