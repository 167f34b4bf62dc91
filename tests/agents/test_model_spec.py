"""RAVEN_MODEL's forms: parsed into specs, malformed ones refused with the accepted forms."""

from __future__ import annotations

import pytest

from agents.models.model_spec import ModelSpec, ModelSpecError, parse_model_spec
from bot.cli.main import main


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("claude-sonnet-5", ModelSpec("anthropic", "claude-sonnet-5")),
        ("anthropic:claude-sonnet-5", ModelSpec("anthropic", "claude-sonnet-5")),
        ("openai:gpt-5", ModelSpec("openai", "gpt-5")),
        (
            "openai:qwen2.5-coder@http://127.0.0.1:8080/v1",
            ModelSpec("openai", "qwen2.5-coder", "http://127.0.0.1:8080/v1"),
        ),
        # Ollama's tags hold a colon; a URL may hold credentials and its own `@`.
        ("openai:qwen2.5:1.5b", ModelSpec("openai", "qwen2.5:1.5b")),
        (
            "openai:m@https://u:p@proxy.example/v1",
            ModelSpec("openai", "m", "https://u:p@proxy.example/v1"),
        ),
        # An `@` not before a URL is part of the name (Vertex-style versions).
        ("anthropic:claude-x@20250101", ModelSpec("anthropic", "claude-x@20250101")),
    ],
)
def test_accepted_forms(text: str, spec: ModelSpec) -> None:
    assert parse_model_spec(text) == spec


@pytest.mark.parametrize(
    "text",
    ["", "gemini:pro", "openai:", "openai:@http://h/v1", "two words", "openai:m@ftp://h/v1"],
)
def test_malformed_entries_name_the_accepted_forms(text: str) -> None:
    with pytest.raises(ModelSpecError, match="accepted forms"):
        parse_model_spec(text)


def test_a_malformed_raven_model_stops_start_up_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAVEN_MODEL", "gemini:pro")
    assert main(["doctor"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    problems = [line for line in lines if "RAVEN_MODEL" in line]
    assert len(problems) == 1 and len(lines) == 2  # the heading and the one line
    assert "unknown provider 'gemini'" in problems[0]
    assert "openai:<model>@<base URL>" in problems[0]
