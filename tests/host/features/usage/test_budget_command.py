"""The `budget` command and the `status` line in the assembled runtime, with the real
Anthropic SDK against a loopback fake: a person sees their own day; only admins
(RAVEN_ADMINS) see or set another's, by mention, and the replies name people by display name
(a mention in the bot's message would ping them); a money budget must be in the prices'
currency; an override outlives a restart; `budget review` is not a command. `status` says
what the conversation spent today once a model was called, and nothing before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Runtime
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, inbound
from tests.runtime_kit import chat_runtime, online

ADMIN = "U9"
NAMES = {"U1": "Alice Liddell", "U2": "Bob Builder", ADMIN: "Ada Admin"}


class NamedChat(FakeChatAdapter):
    """A platform that knows people's display names (as Slack's directory does)."""

    async def display_name(self, user_id: str) -> str:
        return NAMES.get(user_id, user_id)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> AsyncIterator[FakeAnthropic]:
    async with online(monkeypatch) as server:
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        monkeypatch.setenv("RAVEN_BUDGET_PERSON_DAY", "50000")
        monkeypatch.setenv("RAVEN_ADMINS", ADMIN)
        yield server


class Thread:
    """One thread of the test platform, as its people type into it."""

    def __init__(self, runtime: Runtime, chat: NamedChat) -> None:
        self.runtime = runtime
        self.chat = chat
        self.events = 0

    async def say(self, text: str, author: str = "U1") -> str:
        """`author` writes `text`; the bot's last post once the thread is quiet."""
        self.events += 1
        msg = inbound(text, f"e{self.events}-{id(self)}", author)
        posted = len(self.chat.texts)
        turn = await self.runtime.service.accept(msg)
        if turn is not None:  # control words (`status`) are answered as they arrive
            await turn
        await self.runtime.service.quiesce(msg.conversation)
        assert len(self.chat.texts) > posted, f"no reply to {text!r}"
        return self.chat.texts[-1]


async def test_a_person_sees_their_own_budget_and_only_admins_touch_anothers(
    fake: FakeAnthropic,
) -> None:
    chat = NamedChat()
    async with chat_runtime(chat) as runtime:
        thread = Thread(runtime, chat)
        own = await thread.say("budget")
        assert (
            own == "You have spent 0 tokens in 0 model calls today; a daily limit of 50,000 tokens."
        )

        refused_look = await thread.say("budget @U2")
        assert refused_look == "Only admins can see or set another person's budget."
        refused_set = await thread.say("budget <@U2> 100000")
        assert refused_set == "Only admins can see or set another person's budget."
        # A person cannot raise their own limit either.
        assert (
            await thread.say("budget @U1 900000") == "Only admins can set a budget (RAVEN_ADMINS)."
        )

        tokens = await thread.say("budget @U2 100000", author=ADMIN)
        assert tokens == "Bob Builder's daily model budget is now 100,000 tokens."
        seen = await thread.say("budget <@U2>", author=ADMIN)
        assert seen == (
            "Bob Builder has spent 0 tokens in 0 model calls today; "
            "a daily limit of 100,000 tokens."
        )
        money = await thread.say("budget @U2 2.50USD", author=ADMIN)
        assert money == "Bob Builder's daily model budget is now 2.50 USD."
        euros = await thread.say("budget @U2 3EUR", author=ADMIN)
        assert euros == (
            "Budgets in money are counted in USD (prices.toml): write `3USD` or a number of tokens."
        )
        wrong = await thread.say("budget @U2 1.2.3", author=ADMIN)
        assert wrong == (
            "'1.2.3' is not a budget: write a number of tokens (50000) or an amount and "
            "currency (2.50USD), or `default`."
        )
        assert await thread.say("budget @U2", author="U2") == (
            "You have spent 0 tokens in 0 model calls today; a daily limit of 2.50 USD."
        )
        # Every reply names people; none mentions (pings) anyone.
        assert not any("<@" in text for text in chat.texts), chat.texts
        assert not fake.requests  # a command, not a model call

    # The override is stored: a new runtime on the same RAVEN_HOME still applies it.
    chat = NamedChat()
    async with chat_runtime(chat) as runtime:
        thread = Thread(runtime, chat)
        assert await thread.say("budget", author="U2") == (
            "You have spent 0 tokens in 0 model calls today; a daily limit of 2.50 USD."
        )
        back = await thread.say("budget @U2 default", author=ADMIN)
        assert back == "Bob Builder's daily budget is back to the default (50,000 tokens)."
        again = await thread.say("budget @U2 default", author=ADMIN)
        assert again == (
            "Bob Builder had no budget of their own; the default applies (50,000 tokens)."
        )
        assert await thread.say("budget", author="U2") == (
            "You have spent 0 tokens in 0 model calls today; a daily limit of 50,000 tokens."
        )
        assert not any("<@" in text for text in chat.texts), chat.texts
    assert db_rows(Path(runtime.settings.home), "SELECT COUNT(*) FROM budget_overrides") == [(0,)]


async def test_budget_followed_by_a_word_goes_to_the_host(fake: FakeAnthropic) -> None:
    fake.queue_text("The budget review is on Friday.")
    chat = NamedChat()
    async with chat_runtime(chat) as runtime:
        reply = await Thread(runtime, chat).say("budget review")
    assert reply == "The budget review is on Friday."
    assert len(fake.requests) == 1


async def test_status_says_what_the_conversation_spent_once_a_model_was_called(
    fake: FakeAnthropic,
) -> None:
    chat = NamedChat()
    async with chat_runtime(chat) as runtime:
        thread = Thread(runtime, chat)
        before = await thread.say("status")
        assert "Model use" not in before and "model call" not in before, before

        fake.queue_message(
            {"content": "Hello.", "usage": {"input_tokens": 1200, "output_tokens": 34}}
        )
        assert await thread.say("hello") == "Hello."
        home = Path(runtime.settings.home)
        conversation = inbound("x", "x").conversation.id
        (spent,) = db_rows(
            home,
            "SELECT COUNT(*), SUM(input_tokens + output_tokens) FROM model_calls "
            "WHERE conversation = ?",
            conversation,
        )
        calls, tokens = spent
        assert calls >= 1 and tokens >= 1234  # the Host's call (and the skill gate's)

        after = await thread.say("status")
        plural = "s" if calls != 1 else ""
        line = f"Model use in this conversation today: {tokens:,} tokens in {calls} model call"
        assert f"{line}{plural} (" in after, after
        assert " USD)." in after, after

        # Another thread of the same channel has spent nothing of its own.
        elsewhere = inbound("status", "other", "U1", thread="T2")
        await runtime.service.accept(elsewhere)
        await runtime.service.quiesce(elsewhere.conversation)
        assert "Model use" not in chat.texts[-1], chat.texts[-1]
