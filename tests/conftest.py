"""Shared fixtures: an isolated environment (no proxies, no real keys, tmp RAVEN_HOME)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.store import Store
from host.runtime.conversation_log import ConversationLog
from tests.slurm_cluster import SlurmCluster, missing, running_cluster
from tests.xdist_groups import GroupedScheduling

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
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "DISCORD_TOKEN",
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """One worker more than cores (`-n auto`): a third of a worker's time is spent waiting
    on the processes and servers a test starts (on 2 cores: 3 m 42 s instead of 4 m 16 s)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # the operator's choice, read by xdist itself
    return len(os.sched_getaffinity(0)) + 1


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> GroupedScheduling:
    """Tests sharing state beyond one test run in one worker (tests/xdist_groups.py)."""
    return GroupedScheduling(config, log)


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
    db = Store(tmp_path / "db" / "raven.db", all_migrations())
    await db.open()
    yield db
    await db.close()


@pytest.fixture
def conversation_log(store: Store) -> ConversationLog:
    """The conversation log over the fresh store."""
    return ConversationLog(store)


@pytest.fixture(scope="session", name="slurm_cluster")
def slurm_cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The session's one-node Slurm cluster, started when a test first asks for it.

    Defined here, once: a session fixture imported into several test modules is a separate
    fixture in each, so every module started (and at the end stopped, ~4 s each) a cluster of
    its own. Skipped, with the reason printed, when Slurm is not installed or not root.
    """
    reason = missing()
    if reason is not None:
        pytest.skip(f"Slurm tests skipped: {reason}")
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
