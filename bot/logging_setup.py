"""Logging with every configured secret redacted: to a rotating file in RAVEN_HOME/logs/ and
to stderr.

At a terminal (the console, whose terminal is the chat, and every one-shot command) stderr
only gets warnings and errors, said briefly (the file has the details).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable
from logging.handlers import RotatingFileHandler
from pathlib import Path

REDACTED = "[redacted]"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Rotation keeps the logs of a long-running bot bounded: 4 files of 5 MB at most.
LOG_BYTES = 5_000_000
LOG_BACKUPS = 3


def log_file(home: Path) -> Path:
    """Where every command writes its log."""
    return home / "logs" / "raven.log"


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


class _Brief(logging.Formatter):
    """One short line for a person at a terminal: no timestamp, logger or traceback (the
    log file has those)."""

    def __init__(self, details: Path | None) -> None:
        super().__init__()
        self._details = details

    def format(self, record: logging.LogRecord) -> str:
        text = f"raven-bot {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and self._details is not None:
            text += f" (details in {self._details})"
        return text


class _WarnsOnce(logging.Handler):
    """A handler whose write failures are said once, in one line, then silenced: logging's
    default prints a traceback to stderr for every record (a full disk made hundreds)."""

    _failed = False

    def handleError(self, record: logging.LogRecord) -> None:
        if self._failed:
            return
        self._failed = True
        error = sys.exc_info()[1]
        reason = f": {error}" if error is not None else ""
        with contextlib.suppress(Exception):  # stderr itself may be what fails
            sys.stderr.write(
                f"raven-bot error: cannot write {self.describe()}{reason} (its later errors"
                " are not shown)\n"
            )
            sys.stderr.flush()

    def describe(self) -> str:
        """What this handler writes to, for its one line."""
        return "the log"


class _LogFile(_WarnsOnce, RotatingFileHandler):
    def describe(self) -> str:
        return f"the log file {self.baseFilename}"

    def close(self) -> None:
        # Lines the full disk could not take are lost either way (and were said once); the
        # file is closed all the same.
        with contextlib.suppress(OSError):
            super().close()


class _Stderr(_WarnsOnce, logging.StreamHandler):  # type: ignore[type-arg]
    # Set while a person chats at this terminal: writes a line around the input prompt.
    aside: Callable[[Callable[[], None]], None] | None = None

    def describe(self) -> str:
        return "to stderr"

    def emit(self, record: logging.LogRecord) -> None:
        aside = self.aside
        if aside is None:
            super().emit(record)
        else:
            aside(lambda: super(_Stderr, self).emit(record))


def show_beside(aside: Callable[[Callable[[], None]], None]) -> None:
    """Terminal log lines go through `aside` (the console's screen, which takes the input
    prompt off its line first and shows it again after): a warning never lands after
    `you> `."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _Stderr):
            handler.aside = aside


class _SaidOnce(logging.Filter):
    """At a terminal, a line already shown is not shown again (the log file has every
    occurrence): a failure that recurs, such as a full disk, is one line, not one a
    second."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def configure_logging(
    level: str, secrets: Iterable[str], *, file: Path | None = None, console: bool = False
) -> None:
    """Send logs to stderr (stdout is the console chat) through the redactor, and to `file`
    (rotating) when given. With `console`, stderr only gets warnings and errors, one brief
    line each. A file that cannot be opened leaves stderr at `level`, so nothing is lost
    (an unusable RAVEN_HOME is reported when the bot starts)."""
    filters: list[logging.Filter] = [SecretRedactor(secrets), _DropBoltTokenNotice()]
    handlers: list[logging.Handler] = []
    written = _file_handler(file) if file is not None else None
    if written is not None:
        written.setFormatter(logging.Formatter(LOG_FORMAT))
        handlers.append(written)
    stderr = _Stderr(sys.stderr)
    if console and written is not None:
        stderr.setLevel(logging.WARNING)
        stderr.setFormatter(_Brief(file))
        stderr.addFilter(_SaidOnce())
    else:
        stderr.setFormatter(logging.Formatter(LOG_FORMAT))
    handlers.append(stderr)
    for handler in handlers:
        for log_filter in filters:
            handler.addFilter(log_filter)
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    # Chatty libraries stay at WARNING unless we debug.
    # APScheduler logs every job added and run at INFO; ours logs each fire with its lateness.
    for noisy in ("httpx", "httpcore", "anthropic", "aiosqlite", "asyncio", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def _file_handler(path: Path) -> logging.Handler | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _LogFile(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8")
    except OSError:
        return None
