"""The assembled offline runtime with a fake clock on its scheduled tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from host.features.schedules.feature import SchedulesFeature
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.host.features.schedules.kit import Bot, FakeClock
from tests.runtime_kit import chat_runtime


@pytest.fixture
async def bot(isolated_env: Path) -> AsyncIterator[Bot]:
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        rt.feature(SchedulesFeature).tasks.clock = clock
        yield Bot(rt, chat, clock)
