"""The assembled runtime (offline, or with a loopback model) with a fake clock on its
scheduled tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from host.features.schedules.feature import SchedulesFeature
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.host.features.schedules.kit import Bot, FakeClock
from tests.runtime_kit import chat_runtime, online


@pytest.fixture
async def bot(isolated_env: Path) -> AsyncIterator[Bot]:
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        rt.feature(SchedulesFeature).tasks.clock = clock
        yield Bot(rt, chat, clock)


@pytest.fixture
async def model_bot(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Bot, FakeAnthropic]]:
    async with online(monkeypatch) as fake:
        chat = FakeChatAdapter()
        async with chat_runtime(chat, serving=True) as rt:
            clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
            rt.feature(SchedulesFeature).tasks.clock = clock
            yield Bot(rt, chat, clock), fake
