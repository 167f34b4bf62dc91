"""The serving lock: exclusive per data directory, naming its holder, never a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.serving_lock import (
    LOCK_FILE,
    AlreadyServing,
    Holder,
    LockError,
    ServingLock,
    serving_holder,
)


def test_second_lock_names_the_holder_and_release_lets_the_next_in(tmp_path: Path) -> None:
    with ServingLock(tmp_path) as first:
        first.acquire("raven-bot chat")
        assert serving_holder(tmp_path) == Holder(os.getpid(), "raven-bot chat")
        with pytest.raises(AlreadyServing) as refused:
            ServingLock(tmp_path).acquire("raven-bot run")
        assert f"(pid {os.getpid()}, `raven-bot chat`) is serving {tmp_path}" in str(refused.value)
    # A clean stop clears the record: nobody serves, and the next one gets the lock.
    assert serving_holder(tmp_path) is None
    with ServingLock(tmp_path) as again:
        again.acquire("raven-bot run")
        assert serving_holder(tmp_path) == Holder(os.getpid(), "raven-bot run")


def test_a_dead_holders_record_is_nobody(tmp_path: Path) -> None:
    # What `kill -9` leaves: the record of a process that is gone (pid beyond pid_max).
    (tmp_path / LOCK_FILE).write_text('{"pid": 2147483647, "command": "raven-bot run"}')
    assert serving_holder(tmp_path) is None
    with ServingLock(tmp_path) as lock:
        lock.acquire("raven-bot chat")


def test_a_planted_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / LOCK_FILE).symlink_to(target)
    with pytest.raises(LockError, match=f"cannot open {tmp_path / LOCK_FILE}"):
        ServingLock(tmp_path).acquire("raven-bot run")
    assert target.read_text() == ""
