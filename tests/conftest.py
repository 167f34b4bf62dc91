"""Shared fixtures: an isolated environment (no proxies, no real keys, tmp RAVEN_HOME)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memory.conversation_log import ConversationLog
from memory.store import Store

_ISOLATED_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "DISCORD_TOKEN",
)


# Tests that share one session-wide resource run in one pytest-xdist worker (`--dist
# loadgroup`): the one-node Slurm cluster, and the README's shell commands started in the
# background (tests/acceptance/conftest.py).
_XDIST_GROUPS = {"slurm_cluster": "slurm", "shell_commands_started": "readme-shell"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the shared resource it uses, for xdist's grouping."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, group in _XDIST_GROUPS.items():
            if fixture in names:
                item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Every test gets its own RAVEN_HOME and no proxy or credential from the machine."""
    for name in _ISOLATED_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("RAVEN_"):
            monkeypatch.delenv(name, raising=False)
    home = tmp_path / "raven-home"
    monkeypatch.setenv("RAVEN_HOME", str(home))
    # Settings read `.env` from the working directory: run tests from an empty one.
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    yield home


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An open store on a fresh database."""
    db = Store(tmp_path / "db" / "raven.db")
    await db.open()
    yield db
    await db.close()


@pytest.fixture
def conversation_log(store: Store) -> ConversationLog:
    """The conversation log over the fresh store."""
    return ConversationLog(store)
