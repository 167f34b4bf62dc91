"""A log that cannot be written is said once, in one line, and repeats are not said again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.logging_setup import configure_logging

# Every write to /dev/full fails with ENOSPC: a full disk, for real, for one file.
FULL = Path("/dev/full")


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """Whatever a test configures, the root logger is put back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        handler.close()
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def full_disk() -> Path:
    if not FULL.is_char_device():
        pytest.skip("/dev/full is not available here")
    return FULL


def test_a_log_file_on_a_full_disk_is_said_once_in_one_line(
    full_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", [], file=full_disk, console=True)
    log = logging.getLogger("raven.test")
    for n in range(20):
        log.info("step %d", n)
        log.error("saving %d failed", n % 3)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "raven-bot error: cannot write the log file /dev/full: [Errno 28] No space left on"
        " device (its later errors are not shown)",
        "raven-bot error: saving 0 failed",
        "raven-bot error: saving 1 failed",
        "raven-bot error: saving 2 failed",
    ]


def test_a_log_file_that_fails_on_a_platform_bot_keeps_stderr_whole(
    full_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", [], file=full_disk, console=False)
    log = logging.getLogger("raven.test")
    for _ in range(3):
        log.warning("the same warning")
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--- Logging error ---" not in err
    assert err.count("cannot write the log file /dev/full") == 1
    # Not at a terminal: stderr is the log, so every record is on it.
    assert err.count("WARNING raven.test: the same warning") == 3


def test_a_repeated_line_at_the_terminal_is_shown_once_and_filed_each_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "logs" / "raven.log"
    configure_logging("INFO", [], file=file, console=True)
    log = logging.getLogger("raven.test")
    for _ in range(5):
        log.error("checkpointing failed")
    log.warning("checkpointing failed")
    assert capsys.readouterr().err.splitlines() == [
        "raven-bot error: checkpointing failed",
        "raven-bot warning: checkpointing failed",
    ]
    assert file.read_text(encoding="utf-8").count("ERROR raven.test: checkpointing failed") == 5
