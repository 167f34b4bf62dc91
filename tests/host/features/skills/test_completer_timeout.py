"""The skills model call: bounded by the provider's own limit (RAVEN_MODEL_TIMEOUT) unless a
tighter one is given, and a timeout says what timed out, never an empty reason."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from agents.models.types import Message, ModelError, ModelReply, TextBlock, ToolSpec
from host.features.skills.completer import ProviderCompleter
from tests.fakes.providers import TestProvider


class Stalled(TestProvider):
    """Never answers until released."""

    label = "local-qwen"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.asked.set()
        await self.release.wait()
        return ModelReply(content=[TextBlock(text="late")], stop_reason="end_turn")


class TimesOut(TestProvider):
    """The provider's own limit fires (as the Anthropic provider's does)."""

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        raise ModelError("the model call timed out after 1200s", kind="timeout")


async def test_a_given_limit_says_what_timed_out() -> None:
    completer = ProviderCompleter(Stalled(), timeout=0.05, purpose="the skill gate")
    with pytest.raises(ModelError) as info:
        await completer.complete("s", "u")
    assert info.value.kind == "timeout"
    text = str(info.value)
    assert "the skill gate to local-qwen timed out after 0.05s" in text
    assert "RAVEN_MODEL_TIMEOUT" in text


async def test_without_a_limit_the_providers_own_applies() -> None:
    assert inspect.signature(ProviderCompleter).parameters["timeout"].default is None
    with pytest.raises(ModelError, match="timed out after 1200s"):
        await ProviderCompleter(TimesOut()).complete("s", "u")


async def test_without_a_limit_a_slow_answer_arrives() -> None:
    provider = Stalled()
    call = asyncio.create_task(ProviderCompleter(provider).complete("s", "u"))
    await provider.asked.wait()  # the call is in flight, with no limit of its own
    provider.release.set()
    assert await call == "late"
