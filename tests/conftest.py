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
    # Keyword-only recall unless a test asks for MiniLM: loading the model costs seconds
    # in every bot process (tests of semantic recall set RAVEN_MEMORY_EMBEDDER themselves).
    monkeypatch.setenv("RAVEN_MEMORY_EMBEDDER", "keyword")
    # Episodes by the rule: a background model call per turn would take answers scripted
    # for the Host (tests of the model former build it themselves, or set this).
    monkeypatch.setenv("RAVEN_MEMORY_EPISODES", "rule")
    # Skill Forge off unless a test turns it on: its gate is one more model call, and its
    # blocks would change the Host prompts other tests inspect.
    monkeypatch.setenv("RAVEN_SKILLS", "false")
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
