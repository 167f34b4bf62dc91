"""Worker clarifications: answered from the conversation when determined, never for approvals,
otherwise asked of the user through the broker."""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any

from agents.models.offline import OfflineProvider
from agents.models.types import Message, ModelReply, TextBlock, ToolCall, ToolSpec
from core.ids import ConversationRef
from core.store import Store
from host.prompts.broker import PromptBroker
from host.prompts.clarify import Clarifier, needs_approval
from host.runtime.conversation_log import ConversationLog
from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.fakes.providers import TestProvider
from tests.helpers import decision_bus, eventually

CONV = ConversationRef("test", "W", "C", "T")


class AnswerProvider(TestProvider):
    """Answers the clarification tool with a fixed payload; records calls."""

    label = "answerer"

    def __init__(self, payload: dict[str, Any] | None) -> None:
        self.payload = payload
        self.calls: list[str] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        block = messages[-1].content[0]
        assert isinstance(block, TextBlock)
        self.calls.append(block.text)
        if self.payload is None:
            return ModelReply(content=[TextBlock(text="no tool")], stop_reason="end_turn")
        call = ToolCall(id="c1", name="answer_clarification", input=self.payload)
        return ModelReply(content=[call], stop_reason="tool_use")


async def _setup(
    store: Store, provider: Any
) -> tuple[Clarifier, PromptBroker, RecordingPromptSurface]:
    surface = RecordingPromptSurface()
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": surface}),
        bus=decision_bus({"clarification": _noop}),
    )
    log = ConversationLog(store)
    message = "I want the report as CSV."
    await log.claim_inbound(
        CONV,
        event_keys=["e1"],
        ttl_seconds=60,
        author_id="U1",
        author_name="alice",
        text=message,
        payload="{}",
    )
    return Clarifier(provider, broker, log), broker, surface


async def _noop(_: object) -> None:
    return None


def test_approval_questions_are_recognised() -> None:
    assert needs_approval("May I push to main?")
    assert needs_approval("Should I delete the old table?")
    assert not needs_approval("Which output format do you prefer?")


async def test_answered_from_conversation(store: Store) -> None:
    provider = AnswerProvider({"answerable": True, "answer": "CSV", "known": "user said CSV"})
    clarifier, _, surface = await _setup(store, provider)
    result = await clarifier.ask(CONV, "U1", "Which output format?", node_id="n1")
    assert (result.answer, result.source) == ("CSV", "conversation")
    assert surface.shown == []
    # The question and the conversation reach the answerer fenced as untrusted data.
    assert "<untrusted-data" in provider.calls[0] and "report as CSV" in provider.calls[0]


async def test_approval_goes_to_user_without_a_model_call(store: Store) -> None:
    provider = AnswerProvider({"answerable": True, "answer": "yes"})
    clarifier, broker, surface = await _setup(store, provider)
    task = asyncio.create_task(clarifier.ask(CONV, "U1", "May I push to main?", node_id="n1"))
    await eventually(lambda: bool(surface.shown))
    assert provider.calls == []
    prompt = surface.shown[0]
    assert "push to main" in prompt.question
    outcome = await broker.answer(prompt.id, prompt.nonce, "U1", "no, open a PR")
    assert outcome.status == "accepted"
    result = await task
    assert (result.answer, result.source) == ("no, open a PR", "user")


async def test_unanswerable_is_annotated_with_what_is_known(store: Store) -> None:
    provider = AnswerProvider({"answerable": False, "known": "the user wants CSV"})
    clarifier, broker, surface = await _setup(store, provider)
    task = asyncio.create_task(clarifier.ask(CONV, "U1", "Which delimiter?", node_id="n1"))
    await eventually(lambda: bool(surface.shown))
    assert "What the conversation already says: the user wants CSV" in surface.shown[0].question
    # Only the requester may answer.
    stranger = await broker.answer(surface.shown[0].id, surface.shown[0].nonce, "U9", ";")
    assert stranger.status == "not_allowed"
    await broker.answer(surface.shown[0].id, surface.shown[0].nonce, "U1", ";")
    assert (await task).answer == ";"


async def test_expired_question_tells_the_worker_to_be_conservative(store: Store) -> None:
    clarifier, broker, surface = await _setup(store, OfflineProvider())
    task = asyncio.create_task(clarifier.ask(CONV, "U1", "Which delimiter?", node_id="n1"))
    await eventually(lambda: bool(surface.shown))
    await broker.cancel_conversation(CONV)
    result = await task
    assert result.source == "none" and "conservative" in result.answer


async def test_answerer_without_verdict_falls_back_to_user(store: Store) -> None:
    clarifier, broker, surface = await _setup(store, AnswerProvider(None))
    task = asyncio.create_task(clarifier.ask(CONV, "U1", "Which delimiter?", node_id="n1"))
    await eventually(lambda: bool(surface.shown))
    await broker.answer(surface.shown[0].id, surface.shown[0].nonce, "U1", "tab")
    assert (await task).source == "user"


async def test_the_answerer_never_reads_a_viewer_links_token(store: Store) -> None:
    # A viewer link opens the conversation's records; the bot posts them under its replies.
    token = "v1.eyJjIjoidGVzdDpXOkM6VCIsImUiOjE3OTY2NTU2MDB9.VDzVcljq3c8jmXDuIxhpUQzym5_Mz8Pb-3k"
    log = ConversationLog(store)
    await log.record_outbound(
        CONV,
        idempotency_key="turn:t0:reply",
        text=f"Done.\n\n🔎 [Open run r1](http://127.0.0.1:8787/v/{token}/run/r1)",
        turn_id=None,
    )
    provider = AnswerProvider({"answerable": True, "answer": "CSV", "known": "user said CSV"})
    clarifier, _, _ = await _setup(store, provider)
    await clarifier.ask(CONV, "U1", "Which output format?", node_id="n1")
    assert token not in provider.calls[0]
    assert "/v/(link)/run/r1" in provider.calls[0]
