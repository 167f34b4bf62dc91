"""Speaks when spoken to (issue 39, findings 1 and 7): in a thread the bot answers a
mention, its requester's follow-up (by `RAVEN_THREAD_REPLIES`), a typed answer to a question
waiting for its author and control words; others' chatter is recorded and gets nothing. With a
model the Host may choose to say nothing to a follow-up. A near miss of a control word gets
"did you mean", and a stray answer "no question is waiting for you here"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType

import pytest

from agents.models.offline import OFFLINE_NOTICE, OFFLINE_REMINDER
from agents.models.types import Message, ModelReply, TextBlock, ToolCall, ToolSpec
from agents.tools import ToolRegistry
from bot.app import Runtime, build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.store import Store
from host.agent.host_agent import HostAgent
from host.agent.no_reply import NO_REPLY_TOOL
from host.conversation.lanes import LaneManager
from host.conversation.near_misses import NO_QUESTION_WAITING, did_you_mean_text, near_miss
from host.conversation.outbox import Outbox
from host.conversation.service import (
    CONTROL_WORDS,
    ConversationConfig,
    ConversationParts,
    ConversationService,
)
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, TurnRequested
from host.runtime.messages import InboundMessage, stored_inbound
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.providers import TestProvider
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import inbound

ALICE, BOB = "U1", "U2"
CONV = inbound("x", "x").conversation


def said(text: str, event: str, author: str = ALICE, *, mention: bool = True) -> InboundMessage:
    """A message in the test thread; `mention=False`: a reply that does not mention the bot."""
    return inbound(text, event, author).model_copy(update={"addressed": mention})


@pytest.fixture
def mode(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, isolated_env: Path
) -> str:
    value = getattr(request, "param", "requester")
    monkeypatch.setenv("RAVEN_THREAD_REPLIES", value)
    return value


@pytest.fixture
async def bot(isolated_env: Path, mode: str) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    await asyncio.to_thread(isolated_env.mkdir, parents=True, exist_ok=True)
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    yield rt, adapter
    await shutdown(rt)


async def _say(rt: Runtime, msg: InboundMessage) -> None:
    """Send a message and wait for what it started (its turn, if any)."""
    turn = await rt.service.accept(msg)
    if turn is not None:
        await turn


async def _handled(store: Store, text: str) -> bool:
    row = await store.fetchone(
        "SELECT handled FROM messages WHERE direction = 'in' AND text = ?", (text,)
    )
    return row is not None and bool(row["handled"])


async def test_a_bystanders_chatter_gets_nothing_and_the_requesters_follow_up_is_answered(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    assert adapter.texts == [OFFLINE_NOTICE]

    await _say(rt, said("nice, thanks!", "e2", BOB, mention=False))
    await _say(rt, said("1", "e3", BOB, mention=False))  # a stray answer is chatter too
    await _say(rt, said("and tomorrow?", "e4", mention=False))
    # Only the requester's follow-up (after the chatter) was answered.
    assert adapter.texts == [OFFLINE_NOTICE, OFFLINE_REMINDER]
    # The chatter is recorded, handled, and stays in the thread's history for later turns.
    assert await _handled(rt.store, "nice, thanks!")
    history = [m.text for m in await rt.conversation_log.history(CONV.id, limit=10)]
    assert "nice, thanks!" in history

    # A bystander who mentions the bot is answered.
    await _say(rt, said("what about me?", "e5", BOB))
    assert adapter.texts[-1] == OFFLINE_REMINDER and len(adapter.texts) == 3


@pytest.mark.parametrize("mode", ["mentions"], indirect=True)
async def test_mentions_mode_answers_only_mentions(
    bot: tuple[Runtime, FakeChatAdapter], mode: str
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    await _say(rt, said("and tomorrow?", "e2", mention=False))
    await _say(rt, said("status", "e3", BOB, mention=False))  # control words still work
    assert adapter.texts[0] == OFFLINE_NOTICE and adapter.texts[1].startswith("**Status**")
    await _say(rt, said("and tomorrow?", "e4"))
    assert adapter.texts[2:] == [OFFLINE_REMINDER]


@pytest.mark.parametrize("mode", ["anyone"], indirect=True)
async def test_anyone_mode_answers_a_bystanders_follow_up(
    bot: tuple[Runtime, FakeChatAdapter], mode: str
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    await _say(rt, said("nice, thanks!", "e2", BOB, mention=False))
    assert adapter.texts == [OFFLINE_NOTICE, OFFLINE_REMINDER]


async def test_the_requester_of_a_thread_a_scheduled_task_opened_is_its_owner(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    task_thread = inbound("x", "x", thread="T9").conversation
    await rt.service.requested_turn(
        TurnRequested(
            conversation=task_thread,
            text="check the disk",
            key="task:t_1:now",
            author_id=ALICE,
            author_name="alice",
            task="t_1",
        )
    )
    await rt.service.quiesce(task_thread)
    fired = len(adapter.texts)
    assert await rt.conversation_log.thread_requester(task_thread.id) == ALICE
    bob = inbound("nice", "e1", BOB, thread="T9").model_copy(update={"addressed": False})
    alice = inbound("why?", "e2", ALICE, thread="T9").model_copy(update={"addressed": False})
    await _say(rt, bob)
    await _say(rt, alice)
    assert len(adapter.texts) == fired + 1  # Alice's follow-up only


async def test_a_typed_answer_without_a_mention_answers_only_a_question_waiting_for_its_author(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    prompt = await rt.broker.create(
        conversation=CONV, kind="choice", question="Which?", options=("a", "b"), requester=ALICE
    )
    before = len(adapter.texts)
    # Bob's "1" is chatter: the question waits for Alice, and he did not mention the bot.
    await _say(rt, said("1", "e2", BOB, mention=False))
    assert (await rt.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]
    await _say(rt, said("2", "e3", mention=False))
    decided = await rt.broker.get(prompt.id)
    assert decided is not None and decided.state == "answered" and decided.answer == "b"
    assert len(adapter.texts) == before + 1  # the confirmation only
    assert adapter.private == []  # Bob was not told he may not answer: he did not ask


@pytest.mark.parametrize("mode", ["mentions"], indirect=True)
async def test_a_typed_answer_counts_in_mentions_mode_too(
    bot: tuple[Runtime, FakeChatAdapter], mode: str
) -> None:
    rt, _ = bot
    await _say(rt, said("hello", "e1"))
    prompt = await rt.broker.create(
        conversation=CONV, kind="choice", question="Which?", options=("a", "b"), requester=ALICE
    )
    await _say(rt, said("a", "e2", mention=False))
    decided = await rt.broker.get(prompt.id)
    assert decided is not None and decided.answer == "a"


async def test_a_stray_answer_hears_that_no_question_is_waiting(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    prompt = await rt.broker.create(
        conversation=CONV, kind="approval", question="Run it?", requester=ALICE
    )
    await _say(rt, said("1", "e2"))
    assert (await rt.broker.get(prompt.id)).state == "answered"  # type: ignore[union-attr]
    await rt.service.quiesce(CONV)  # the answer's own turn has spoken
    before = len(adapter.texts)
    for n, stray in enumerate(["1", "approve", "no", "2."]):
        await _say(rt, said(stray, f"s{n}", mention=False))
    await _say(rt, said("deny", "s9", BOB))  # a bystander who mentions the bot
    assert adapter.texts[before:] == [NO_QUESTION_WAITING] * 5
    assert OFFLINE_NOTICE not in adapter.texts[before:]


async def test_control_like_typos_get_did_you_mean_and_real_words_do_not(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, said("hello", "e1"))
    for n, typo in enumerate(["stauts", "stpo", "hlep", "statsu", "schedlue: every 2h | x"]):
        before = len(adapter.texts)
        await _say(rt, said(typo, f"t{n}", mention=False))
        (reply,) = adapter.texts[before:]
        assert reply.startswith("Did you mean `"), (typo, reply)
    assert adapter.texts[1:4] == [did_you_mean_text(w) for w in ("status", "stop", "help")]
    assert adapter.texts[-1] == "Did you mean `schedule:`?"
    # Real short messages go on to a turn (offline: the reminder).
    for n, word in enumerate(["thanks", "hello", "ok", "stop it", "step", "start", "yes please"]):
        before = len(adapter.texts)
        await _say(rt, said(word, f"w{n}"))
        assert adapter.texts[before:] == [OFFLINE_REMINDER], word


def test_near_misses_are_slips_of_the_fingers_only() -> None:
    words = tuple(CONTROL_WORDS)
    assert [near_miss(t, words) for t in ("stauts", "stpo", "hlep", "statsu", "stopp")] == [
        "status",
        "stop",
        "help",
        "status",
        "stop",
    ]
    for real in ("thanks", "hello", "ok", "stop it", "state", "states", "shop", "yelp", "helo"):
        assert near_miss(real, words) is None, real
    assert near_miss("watcher: shell: echo hi", words) is None  # a plan line


async def test_stored_payloads_from_before_addressed_read_as_addressed(
    conversation_log: ConversationLog,
) -> None:
    old = json.loads(inbound("hi", "e1", BOB).model_dump_json())
    del old["addressed"]
    assert stored_inbound(json.dumps(old)).addressed
    await conversation_log.claim_inbound(
        CONV,
        event_keys=["test:event:e1"],
        ttl_seconds=60,
        author_id=BOB,
        author_name="bob",
        text="hi",
        payload=json.dumps(old),
    )
    assert await conversation_log.thread_requester(CONV.id) == BOB


class QuietWhenAllowed(TestProvider):
    """Calls `no_reply` whenever it is offered; otherwise answers "answer"."""

    label = "quiet"

    def __init__(self) -> None:
        self.offered: list[bool] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        if messages[-1].role == "user" and any(
            getattr(b, "type", "") == "tool_result" for b in messages[-1].content
        ):
            return ModelReply(content=[TextBlock(text="(nothing)")], stop_reason="end_turn")
        offered = any(t.name == NO_REPLY_TOOL for t in tools)
        self.offered.append(offered)
        if offered:
            call = ToolCall(id="c1", name=NO_REPLY_TOOL, input={"reason": "just thanks"})
            return ModelReply(content=[call], stop_reason="tool_use")
        return ModelReply(content=[TextBlock(text="answer")], stop_reason="end_turn")


async def test_the_host_may_say_nothing_to_a_follow_up_but_always_answers_a_mention(
    conversation_log: ConversationLog, store: Store
) -> None:
    channel = RecordingChannel()
    provider = QuietWhenAllowed()
    lanes = LaneManager(EventBus())
    outbox = Outbox(conversation_log, MappingProxyType({channel.platform: channel}))
    service = ConversationService(
        ConversationParts(
            conversation_log,
            lanes,
            HostAgent(provider, ToolRegistry[TurnContext]()),
            outbox,
            EventBus(),
        ),
        ConversationConfig(dedup_ttl_seconds=60),
    )
    first = await service.accept(said("deploy it", "e1"))
    assert first is not None and (await first).text == "answer"
    follow_up = await service.accept(said("thanks!", "e2", mention=False))
    assert follow_up is not None
    outcome = await follow_up
    assert outcome.text == "" and channel.texts == ["answer"]
    record = await conversation_log.turn(outcome.turn_id)
    assert record is not None and record.status == "completed" and record.no_reply
    # A mention is never offered the choice.
    again = await service.accept(said("thanks!", "e3"))
    assert again is not None and (await again).text == "answer"
    # With a model, a bare "yes" goes to the Host: it may have asked in plain words.
    yes = await service.accept(said("yes", "e4"))
    assert yes is not None and (await yes).text == "answer"
    assert provider.offered == [False, True, False, False]
    assert channel.texts == ["answer", "answer", "answer"]
    await lanes.drain(1)
