"""Edge basics: secret redaction in logs, .env.example completeness, provider choice."""

from __future__ import annotations

import logging

import pytest
from pydantic import AliasChoices

from agents.models.anthropic_provider import AnthropicProvider
from agents.models.offline import OfflineProvider
from bot.app import build_provider
from bot.logging_setup import REDACTED, SecretRedactor
from bot.settings import Settings, load_settings
from tests.helpers import REPO

ROOT = REPO


def test_redactor_scrubs_messages_args_and_tracebacks() -> None:
    secret = "sk-ant-api03-supersecretvalue"
    redactor = SecretRedactor([secret, "short"])
    try:
        raise ValueError(f"bad key {secret}")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "calling with %s", (secret,), sys.exc_info()
        )
    assert redactor.filter(record)
    assert secret not in record.getMessage() and REDACTED in record.getMessage()
    assert record.exc_text is not None and secret not in record.exc_text


def test_env_example_lists_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        env = alias.choices[0] if isinstance(alias, AliasChoices) else alias
        assert f"# {env}=" in text, f"{env} missing from .env.example"
        assert field.description, f"{env} has no description"


def test_provider_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(build_provider(load_settings()), OfflineProvider)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000000000")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    provider = build_provider(load_settings())
    assert isinstance(provider, AnthropicProvider)
    assert provider.name.startswith("anthropic:")
