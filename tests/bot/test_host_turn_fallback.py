"""A Host turn a fallback model answered, in the assembled bot against the loopback Anthropic
fake: the reply is the fallback's answer alone (no note in it), the switch is logged once, and
the turn's record in the turn log says which model answered and why."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import inbound
from tests.runtime_kit import chat_runtime, online

NOTE = "answered by the fallback model anthropic:claude-b: anthropic:claude-a was overloaded"


async def test_a_host_turn_that_fell_back_is_logged_once_and_recorded_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with online(monkeypatch) as fake:
        monkeypatch.setenv("RAVEN_MODEL", "claude-a")
        monkeypatch.setenv("RAVEN_MODEL_FALLBACKS", "claude-b")
        # The SDK's own retries would answer the 529 before the chain moves on.
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        fake.queue_error(529, "Overloaded")
        fake.queue_text("Hello from the fallback.")
        adapter = FakeChatAdapter()
        with caplog.at_level(logging.WARNING, logger="agents.models.fallback"):
            async with chat_runtime(adapter) as runtime:
                msg = inbound("hello", "e1")
                turn = await runtime.service.accept(msg)
                assert turn is not None
                await turn
                await runtime.service.quiesce(msg.conversation)
                db = runtime.settings.raven_home / "raven.db"
        models = [r["json"]["model"] for r in fake.requests]

    assert models == ["claude-a", "claude-b"]
    assert adapter.texts == ["Hello from the fallback."]
    switches = [r.getMessage() for r in caplog.records if r.name == "agents.models.fallback"]
    assert switches == [
        "model anthropic:claude-a was overloaded; this turn falls back to anthropic:claude-b"
    ]
    with sqlite3.connect(db) as conn:
        ((transcript,),) = conn.execute("SELECT transcript FROM turns").fetchall()
    assert {"type": "fallback", "text": NOTE} in json.loads(transcript)
