"""`raven-bot chat` over a damaged `scheduler.db` starts: one line says it was moved aside
and rebuilt, no traceback, exit 0 (issue 38: it stopped with SQLAlchemy's traceback)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from host.runtime.job_store_health import damaged_copies
from tests.bot.cli.test_cli_end_to_end import _env, _run

pytestmark = pytest.mark.slow


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 16)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:4096])  # its schema page only: the tables are gone


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (_garbage, "file is not a database"),
    "truncated": (_truncated, "malformed"),
}


@pytest.mark.parametrize("kind", DAMAGES)
async def test_chat_over_a_damaged_job_store_says_it_once_and_starts(
    isolated_env: Path, kind: str
) -> None:
    env = _env(isolated_env)
    code, _, err = await _run("chat", stdin=b"status\n", env=env)
    assert code == 0, err
    store = isolated_env / "scheduler.db"
    damage, reason = DAMAGES[kind]
    damage(store)

    code, out, err = await _run("chat", stdin=b"status\n", env=env)
    assert code == 0, err
    assert "Traceback" not in err and "sqlalchemy" not in err.lower(), err
    (copy,) = damaged_copies(store)
    said = [line for line in err.splitlines() if "scheduler.db" in line]
    assert len(said) == 1, err
    assert said[0].startswith("raven-bot warning: scheduler.db was damaged ("), err
    assert reason in said[0], err
    assert said[0].endswith(f"; moved aside to {copy} and rebuilt from raven.db"), err
    assert "raven>" in out  # it served the conversation

    # The next start finds the rebuilt store sound: nothing more is said.
    code, _, err = await _run("chat", stdin=b"status\n", env=env)
    assert code == 0, err
    assert "scheduler.db" not in err, err
    assert damaged_copies(store) == [copy]
