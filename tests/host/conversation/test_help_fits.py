"""`help` with every default feature's commands fits one Discord message (2,000 characters):
longer, Discord cuts it and the plan syntax at its end is lost."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound
from tests.runtime_kit import chat_runtime

DISCORD_LIMIT = 2000


async def test_help_with_every_feature_fits_one_discord_message(isolated_env: Path) -> None:
    chat = FakeChatAdapter()
    async with chat_runtime(chat) as runtime:
        await runtime.service.accept(inbound("help", "e1"))
        await eventually(lambda: any("id: agent: task" in t for t in chat.texts))
    (shown,) = [t for t in chat.texts if "id: agent: task" in t]
    assert "`evolve AGENT TASKS`" in shown and "**Campaigns**" in shown
    assert len(shown) <= DISCORD_LIMIT, len(shown)
