"""The Host is offered `start_campaign` everywhere, and the tools that read or decide on a
campaign only in a conversation that has one: elsewhere they could only say "no campaign
here", and every Host call would pay for their schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from host.runtime.messages import InboundMessage
from tests.fakes.anthropic_server import FakeAnthropic
from tests.runtime_kit import chat_runtime, online

FOLLOW_UPS = {
    "campaign_status",
    "campaign_wait",
    "campaign_resubmit",
    "campaign_terminate",
    "campaign_report",
}
START = {
    "goal": "watch the toy training",
    "run": "echo loss 0.5",
    "metric": "loss min",
    "budget": "10m",
}


def _msg(thread: str, text: str, event: str) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread=thread,
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
        addressed=True,
    )


def _offered(fake: FakeAnthropic) -> list[set[str]]:
    """The tool names of each Host call so far (the Host's calls offer `start_campaign`)."""
    names = [{str(t["name"]) for t in r["json"].get("tools") or ()} for r in fake.requests]
    return [n for n in names if "start_campaign" in n]


async def test_campaign_follow_ups_are_offered_only_where_a_campaign_is(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with online(monkeypatch) as fake, chat_runtime() as rt:
        fake.queue_tool_use("start_campaign", START)
        fake.queue_text("It waits for your approval.")
        turn = await rt.service.accept(_msg("T1", "@raven start a campaign", "e1"))
        assert turn is not None
        await turn
        fake.queue_text("It is waiting for approval.")
        turn = await rt.service.accept(_msg("T1", "@raven how is it going?", "e2"))
        assert turn is not None
        await turn
        fake.queue_text("No campaign here.")
        turn = await rt.service.accept(_msg("T2", "@raven how is it going?", "e3"))
        assert turn is not None
        await turn

        (record,) = await rt.campaigns.store.recent()
        assert record.conversation.thread == "T1"
        first, after_start, second, other = _offered(fake)
        # Started in the first turn: its later calls in that turn are not offered them yet.
        assert not first & FOLLOW_UPS and not after_start & FOLLOW_UPS
        assert second >= FOLLOW_UPS
        assert not other & FOLLOW_UPS
