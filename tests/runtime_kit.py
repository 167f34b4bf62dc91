"""The assembled runtime for end-to-end tests, built and shut down in one place (typed, so
a test sees `Runtime`'s fields; a change to the assembly root is adapted here once)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bot.app import Runtime, build_runtime, shutdown, start_serving
from bot.settings import Settings, load_settings
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter

TEST_API_KEY = "sk-ant-test-0123456789"


@asynccontextmanager
async def chat_runtime(
    adapter: FakeChatAdapter | None = None,
    settings: Settings | None = None,
    *,
    serving: bool = False,
) -> AsyncIterator[Runtime]:
    """A runtime with one in-process chat adapter (a fresh one unless given), from the
    environment's settings unless given; started (recovery, scheduler, adapters) when
    `serving`; always shut down after."""
    chat = adapter if adapter is not None else FakeChatAdapter()
    runtime = await build_runtime(settings or load_settings(), [lambda: chat])
    try:
        if serving:
            await start_serving(runtime)
        yield runtime
    finally:
        await shutdown(runtime)


@asynccontextmanager
async def online(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropic]:
    """A loopback Anthropic API the settings point at (a test key), for the test's duration."""
    async with FakeAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_API_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        yield fake
