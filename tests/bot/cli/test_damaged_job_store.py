"""`raven-bot chat` over a damaged `scheduler.db` starts: one line says it was moved aside
and rebuilt, no traceback, exit 0 (issue 38: it stopped with SQLAlchemy's traceback); `doctor`
says it is damaged before, and rebuilt after."""

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
    "truncated": (_truncated, "database disk image is malformed"),
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
    # `doctor` reads it (read-only) as the next start will, and says what that start does.
    _, out, _ = await _run("doctor", env=env)
    line = _doctor_line(out)
    assert line.startswith("  [WARN]") and f"damaged ({reason}" in line, line
    assert line.endswith("the next start moves it aside and rebuilds it from raven.db"), line

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
    _, out, _ = await _run("doctor", env=env)
    line = _doctor_line(out)
    assert line.startswith("  [WARN]") and "rebuilt from raven.db after damage" in line, line
    assert f"kept as {copy.name}: delete it once looked at" in line, line


def _doctor_line(out: str) -> str:
    return next(line for line in out.splitlines() if line[9:].startswith("scheduler store "))
