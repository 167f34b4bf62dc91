"""Every duration and number of a `campaign:` line has a maximum (issue 38, finding 9): over
it, the thread gets a reply naming the maximum and no campaign is recorded; an absurd number
(`99999999d`, `1e309`, 400 digits) is refused the same way, never raised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Runtime
from core.ids import ConversationRef
from host.features.oncall.tools import CampaignTools, WaitInput
from host.runtime.turn import TurnContext
from oncall.durations import parse_duration
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import inbound
from tests.runtime_kit import chat_runtime

LINE = "campaign: try it | machine: local | run: echo loss 1 | metric: loss min | budget: 2h"


@pytest.fixture
async def bot(isolated_env: Path) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        yield rt, chat


@pytest.mark.parametrize(
    ("field", "refusal"),
    [
        ("budget: 99999999h", "`budget: 99999999h` is too long: at most 90d"),
        ("poll: 99999999d", "`poll: 99999999d` is too long: at most 1h"),
        ("wake: 99999999d", "`wake: 99999999d` is too long: at most 2h (the campaign's budget)"),
        ("stall: 99999999d", "`stall: 99999999d` is too long: at most 7d"),
        ("time: 3h", "`time: 3h` is too long: at most 2h (the campaign's budget)"),
        ("rounds: 1e309", "`rounds: 1e309`: between 1 and 1000"),
        ("rounds: nan", "`rounds: nan` is not a whole number of rounds"),
        ("stall: " + "9" * 400, "`stall: 99999999999999999999999…` is too long: at most 7d"),
    ],
)
async def test_a_campaign_field_over_its_maximum_is_refused_with_it(
    bot: tuple[Runtime, FakeChatAdapter], field: str, refusal: str
) -> None:
    rt, chat = bot
    line = LINE.replace("budget: 2h", field) if field.startswith("budget") else f"{LINE} | {field}"
    turn = await rt.service.accept(inbound(line, "e1"))
    assert turn is not None
    await turn
    assert refusal in chat.texts[-1], chat.texts[-1]
    assert "The syntax is:" in chat.texts[-1]
    assert await rt.campaigns.store.recent() == []


@pytest.mark.parametrize(
    ("until", "refusal"),
    [
        ("99999999d", "Refused: `until: 99999999d` is too long: at most 90d (the longest budget)"),
        ("nan", "Refused: `until`: 'nan' is not a duration: write it like 90s"),
    ],
)
async def test_campaign_wait_refuses_a_wait_over_the_longest_budget(
    bot: tuple[Runtime, FakeChatAdapter], until: str, refusal: str
) -> None:
    rt, _ = bot
    turn = await rt.service.accept(inbound(LINE, "e1"))
    assert turn is not None
    await turn
    (record,) = await rt.campaigns.store.recent()  # waiting for its command's approval
    owner = TurnContext(ConversationRef("test", "W", "C", "T"), "t1", "U1", "user-U1")
    wait = WaitInput(campaign_id=record.id, until=until, cite=1)
    assert (await CampaignTools(rt.campaigns).campaign_wait(owner, wait)).startswith(refusal)


@pytest.mark.parametrize("text", ["nan", "NaN", "-inf"])
def test_not_a_number_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration|more than zero"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["inf", "1e309", "9" * 400, "9" * 400 + "d", "99999999d"])
def test_an_absurd_duration_is_too_long_for_any_maximum(text: str) -> None:
    with pytest.raises(ValueError, match=r"is too long: at most 1825d"):
        parse_duration(text)
