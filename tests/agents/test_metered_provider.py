"""Every answered model call is recorded with its role, the model that answered, whom it
served and its tokens, through the real SDKs against the loopback fakes."""

from __future__ import annotations

import pytest

from agents.models.anthropic_provider import AnthropicProvider
from agents.models.fallback import FallbackProvider, fallback_note, scoped_for_turn
from agents.models.metered import MeteredProvider, ModelCall
from agents.models.openai_provider import OpenAIProvider
from agents.models.types import Message, ModelError
from core.call_scope import call_scope, current_scope
from core.ids import ConversationRef
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI

CONV = ConversationRef("slack", "T1", "C1", "1.0")


class Calls:
    """A recorder that keeps what it was given."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[ModelCall] = []
        self.fail = fail

    async def record(self, call: ModelCall) -> None:
        if self.fail:
            raise RuntimeError("the ledger is down")
        self.calls.append(call)


def _anthropic(url: str, model: str = "claude-a") -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test", model=model, base_url=url, max_retries=0)


async def test_an_anthropic_call_is_recorded_with_its_scope_and_cache_tokens() -> None:
    calls = Calls()
    async with FakeAnthropic() as fake:
        fake.queue_message(
            {
                "content": "hi",
                "usage": {
                    "input_tokens": 100,
                    "output_tokens": 7,
                    "cache_read_input_tokens": 900,
                    "cache_creation_input_tokens": 50,
                },
            }
        )
        inner = _anthropic(fake.base_url)
        provider = MeteredProvider(inner, role="judge", recorder=calls, clock=lambda: 123.0)
        with call_scope(person="U1", conversation=CONV, run="run_1", node="s2"):
            reply = await provider.complete(system="s", messages=[Message.user_text("hello")])
        await inner.aclose()
    assert reply.text == "hi"
    [call] = calls.calls
    assert (call.role, call.model, call.at) == ("judge", "anthropic:claude-a", 123.0)
    assert call.scope.person == "U1" and call.scope.channel == "slack:T1:C1"
    assert (call.scope.conversation, call.scope.run, call.scope.node) == (CONV.id, "run_1", "s2")
    usage = call.usage
    assert (usage.input_tokens, usage.output_tokens) == (1050, 7)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (900, 50)
    assert usage.fresh_input_tokens == 100
    # The scope ends with its block.
    assert current_scope().person == ""


async def test_an_openai_call_is_recorded_with_its_cached_prompt_tokens() -> None:
    calls = Calls()
    async with FakeOpenAI() as fake:
        fake.queue_completion(
            {
                "content": "ok",
                "usage": {
                    "prompt_tokens": 500,
                    "completion_tokens": 20,
                    "total_tokens": 520,
                    "prompt_tokens_details": {"cached_tokens": 400},
                },
            }
        )
        inner = OpenAIProvider(api_key="k", model="gpt-fake", base_url=fake.base_url, max_retries=0)
        provider = MeteredProvider(inner, role="host", recorder=calls)
        await provider.complete(system="s", messages=[Message.user_text("hello")])
        await inner.aclose()
    [call] = calls.calls
    assert call.model == "openai:gpt-fake"
    assert (call.usage.input_tokens, call.usage.cache_read_tokens) == (500, 400)
    assert call.usage.output_tokens == 20


async def test_a_fallback_answer_is_recorded_under_the_model_that_answered() -> None:
    calls = Calls()
    async with FakeAnthropic() as first, FakeAnthropic() as second:
        first.queue_error(529, "overloaded", error_type="overloaded_error")
        second.queue_text("from b")
        second.queue_text("b again")
        chain = FallbackProvider(
            _anthropic(first.base_url, "a"), [_anthropic(second.base_url, "b")]
        )
        metered = MeteredProvider(chain, role="host", recorder=calls)
        turn = scoped_for_turn(metered)
        await turn.complete(system="s", messages=[Message.user_text("one")])
        # The turn stays on the fallback: the primary is not asked again.
        await turn.complete(system="s", messages=[Message.user_text("two")])
        note = fallback_note(turn)
        await chain.aclose()
        assert len(first.requests) == 1
    assert [c.model for c in calls.calls] == ["anthropic:b", "anthropic:b"]
    assert note is not None and "anthropic:a was overloaded" in str(note)


async def test_a_failed_call_records_nothing_and_a_ledger_failure_does_not_fail_the_call() -> None:
    async with FakeAnthropic() as fake:
        fake.queue_error(400, "bad request", error_type="invalid_request_error")
        fake.queue_text("answered")
        inner = _anthropic(fake.base_url)
        nothing = Calls()
        with pytest.raises(ModelError):
            await MeteredProvider(inner, role="host", recorder=nothing).complete(
                system="s", messages=[Message.user_text("x")]
            )
        assert nothing.calls == []
        broken = MeteredProvider(inner, role="host", recorder=Calls(fail=True))
        reply = await broken.complete(system="s", messages=[Message.user_text("y")])
        await inner.aclose()
    assert reply.text == "answered"
