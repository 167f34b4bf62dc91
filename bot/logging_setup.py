"""Logging to stderr with every configured secret redacted."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

REDACTED = "[redacted]"


class SecretRedactor(logging.Filter):
    """Replaces known secret values in log records before they are formatted out."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message with secrets removed; never drops a record."""
        if not self._secrets:
            return True
        message = record.getMessage()
        cleaned = self.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self.redact(text)
        return True

    def redact(self, text: str) -> str:
        """The text with every secret replaced."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text


class _DropBoltTokenNotice(logging.Filter):
    """Bolt warns that `token` is unused whenever SLACK_BOT_TOKEN is set and we pass our own
    client (which carries that token): expected here, so not worth a warning on every start."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


def configure_logging(level: str, secrets: Iterable[str]) -> None:
    """Send logs to stderr (stdout is the console chat) through the redactor."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretRedactor(secrets))
    handler.addFilter(_DropBoltTokenNotice())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Chatty libraries stay at WARNING unless we debug.
    # APScheduler logs every job added and run at INFO; ours logs each fire with its lateness.
    for noisy in ("httpx", "httpcore", "anthropic", "aiosqlite", "asyncio", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
