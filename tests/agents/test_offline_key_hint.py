"""Offline mode names the key the configured model needs: ANTHROPIC_API_KEY for an Anthropic
model, OPENAI_API_KEY (or a local server's URL in the model) for an `openai:` one — in the
Host's notice and in an in-process agent's offline answer, built from the settings as the bot
builds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.backends.base import AgentTask
from agents.backends.inproc import InProcessBackend
from agents.models.model_spec import build_model_provider
from agents.models.offline import OFFLINE_NOTICE, is_offline_notice
from agents.models.provider import ModelProvider
from agents.models.types import Message
from agents.registry import default_registry
from agents.specialists import default_specialists
from bot.settings import load_settings


def _offline_provider(monkeypatch: pytest.MonkeyPatch, model: str) -> ModelProvider:
    """RAVEN_MODEL's provider with no key of any kind (the test environment has none)."""
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAVEN_MODEL", model)
    settings = load_settings()
    provider = build_model_provider(settings.model_spec, settings.provider_options)
    assert provider.offline
    return provider


async def _notice(provider: ModelProvider) -> str:
    reply = await provider.complete(system="", messages=[Message.user_text("what is 2+2?")])
    return reply.text


async def _agent_answer(provider: ModelProvider, workspace: Path) -> str:
    entry = default_registry(which=lambda _: None).get("research")
    assert entry is not None
    backend = InProcessBackend(provider, default_specialists()["research"])
    task = AgentTask(node_id="n1", agent=entry, prompt="Survey the field.", workspace=workspace)
    outcome = await backend.run(task)
    assert outcome.offline
    return outcome.output


async def test_an_openai_model_without_a_key_names_openai_api_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    provider = _offline_provider(monkeypatch, "openai:gpt-5")
    notice = await _notice(provider)
    assert "ANTHROPIC" not in notice
    assert "the model `openai:gpt-5` speaks the OpenAI API" in notice
    assert "`OPENAI_API_KEY=sk-…`" in notice
    assert "`RAVEN_MODEL=openai:<model>@http://127.0.0.1:8080/v1`" in notice
    assert "explicit plans" in notice  # what works offline is still said

    answer = await _agent_answer(provider, tmp_path)
    assert "ANTHROPIC" not in answer
    assert "(set OPENAI_API_KEY, or name a local server as openai:<model>@<URL>)" in answer


async def test_an_anthropic_model_without_a_key_names_anthropic_api_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for model in ("claude-sonnet-5", "anthropic:claude-sonnet-5"):
        provider = _offline_provider(monkeypatch, model)
        notice = await _notice(provider)
        assert notice == OFFLINE_NOTICE
        assert "`ANTHROPIC_API_KEY=sk-ant-…`" in notice and "OPENAI" not in notice

        answer = await _agent_answer(provider, tmp_path)
        assert "(set ANTHROPIC_API_KEY)" in answer and "OPENAI" not in answer


async def test_every_offline_notice_is_recognised_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The conversation service shows a notice once per conversation, then a reminder.
    for model in ("openai:gpt-5", "claude-sonnet-5"):
        assert is_offline_notice(await _notice(_offline_provider(monkeypatch, model)))
    assert not is_offline_notice("Offline mode: I recognised a plan of 2 node(s)")
