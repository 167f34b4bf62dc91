"""The README's Models section, through the real `raven-bot` process against the loopback
fakes (each started here, on 127.0.0.1; the README's `http://127.0.0.1:8080/v1` replaced by a
fake's URL): an `openai:<model>@<URL>` model answering a console turn, the fallback chain
taking over from an overloaded model, a malformed model stopping the start in one line, and
`doctor`'s lines for a role's model and for a provider it cannot reach."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import (
    Console,
    Result,
    noise,
    product_env,
    project_dir,
    sh,
)
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, tool_call, tool_names

pytestmark = pytest.mark.slow

README_LOCAL = "http://127.0.0.1:8080/v1"
OPENAI_FORM = f"RAVEN_MODEL=openai:qwen2.5-coder@{README_LOCAL}"
FALLBACKS_FORM = f"RAVEN_MODEL_FALLBACKS=claude-haiku-4-5,openai:qwen2.5-coder@{README_LOCAL}"
BAD_PREFIX = "gemini:pro"
ROLE_SETTING = "RAVEN_MODEL_JUDGE"
README_EXAMPLES = [
    OPENAI_FORM,
    FALLBACKS_FORM,
    BAD_PREFIX,
    ROLE_SETTING,
    "model judge",
    "RAVEN_MODEL_MAX_RETRIES",
    ".venv/bin/raven-bot doctor",
    "raven-bot runs show RUN",
]

CHAT = "printf 'hello\\n' | .venv/bin/raven-bot chat"
ANTHROPIC_KEY = "sk-ant-acceptance-models-0123456789"
LOCAL_MODEL = "qwen2.5-coder"
SECRET = "hunter2secret"  # a password in a provider URL


def _setting(form: str, fake_url: str) -> tuple[str, str]:
    """A README `NAME=value` line as a setting, its README server replaced by the fake's."""
    name, _, value = form.partition("=")
    return name, value.replace(README_LOCAL, fake_url)


def _home(tmp_path: Path) -> Path:
    """A fresh RAVEN_HOME."""
    home = tmp_path / "raven-home"
    home.mkdir(exist_ok=True)
    return home


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def _sh(command: str, env: dict[str, str], cwd: Path) -> Result:
    """A command line in the real process, off the event loop the fakes answer on."""
    return await asyncio.to_thread(sh, command, env=env, cwd=cwd)


def _host_calls(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded model calls (the fakes answer the skill gate and episodes unrecorded)."""
    return [r["json"] for r in requests if r["method"] == "POST"]


async def test_an_openai_compatible_server_answers_a_console_turn(tmp_path: Path) -> None:
    async with FakeOpenAI(models=(LOCAL_MODEL,)) as local:
        local.queue_text("Hello from the local model.")
        name, model = _setting(OPENAI_FORM, local.base_url)
        env = product_env(_home(tmp_path), **{name: model})
        result = await _sh(CHAT, env, project_dir(tmp_path / "project"))

    assert result.code == 0, result.both
    assert "Hello from the local model." in result.out, result.both
    # Not offline: a server URL in the model is enough, no key needed.
    assert "offline mode" not in result.out, result.out
    (call, *_) = _host_calls(local.requests)
    assert local.requests[0]["path"] == "/v1/chat/completions"
    assert call["model"] == LOCAL_MODEL
    assert {"submit_graph"} <= tool_names(call), tool_names(call)
    assert any("hello" in str(m.get("content")) for m in call["messages"]), call["messages"]
    assert not noise(result.both), noise(result.both)


async def test_an_overloaded_model_falls_back_along_the_chain(tmp_path: Path) -> None:
    home = _home(tmp_path)
    async with FakeAnthropic() as anthropic, FakeOpenAI(models=(LOCAL_MODEL,)) as local:
        # The README's chain: claude-sonnet-5, then claude-haiku-4-5 (the same Anthropic
        # server), then the local model. Both Anthropic models are overloaded for this turn.
        anthropic.queue_error(529, "Overloaded")
        anthropic.queue_error(529, "Overloaded")
        local.queue_text("The fallback answered.")
        name, chain = _setting(FALLBACKS_FORM, local.base_url)
        env = product_env(
            home,
            ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            ANTHROPIC_BASE_URL=anthropic.base_url,
            RAVEN_MODEL="claude-sonnet-5",
            RAVEN_MODEL_MAX_RETRIES="0",
            **{name: chain},
        )
        result = await _sh(CHAT, env, project_dir(tmp_path / "project"))

    assert result.code == 0, result.both
    assert "The fallback answered." in result.out, result.both
    tried = [call["model"] for call in _host_calls(anthropic.requests)]
    assert tried == ["claude-sonnet-5", "claude-haiku-4-5"], tried
    assert [call["model"] for call in _host_calls(local.requests)] == [LOCAL_MODEL]
    # The switch is logged once per model moved off; a terminal shows the same warning once,
    # as one plain line (no log format: the noise check below).
    log = (home / "logs" / "raven.log").read_text(encoding="utf-8")
    first = "model anthropic:claude-sonnet-5 was overloaded; this turn falls back to "
    second = "model anthropic:claude-haiku-4-5 was overloaded; this turn falls back to "
    assert log.count(first + "anthropic:claude-haiku-4-5") == 1, log
    assert log.count(second + f"openai:{LOCAL_MODEL}") == 1, log
    assert result.err.count("raven-bot warning: model anthropic:") == 2, result.err
    assert result.err.count("this turn falls back to") == 2, result.err
    assert not noise(result.both), noise(result.both)


@pytest.mark.parametrize("command", ["run", "chat"])
@pytest.mark.parametrize(
    ("setting", "value"),
    [("RAVEN_MODEL", BAD_PREFIX), ("RAVEN_MODEL", "openai:"), ("RAVEN_MODEL_FALLBACKS", "bogus:x")],
)
def test_a_malformed_model_stops_the_start_in_one_line(
    tmp_path: Path, command: str, setting: str, value: str
) -> None:
    env = product_env(_home(tmp_path), **{setting: value})
    result = sh(f"raven-bot {command}", env=env, cwd=project_dir(tmp_path / "project"))

    assert result.code != 0, result.both
    assert "Traceback" not in result.both, result.both
    named = [line for line in result.both.splitlines() if line.strip().startswith(f"{setting}:")]
    assert len(named) == 1, result.both
    assert "accepted forms: <model> (Anthropic), anthropic:<model>, openai:<model>" in named[0]
    assert f"'{value}'" in named[0], named[0]


async def test_doctor_shows_a_role_model_and_that_it_answers(tmp_path: Path) -> None:
    async with FakeOpenAI(models=(LOCAL_MODEL,)) as judge:
        env = product_env(
            _home(tmp_path), **{ROLE_SETTING: f"openai:{LOCAL_MODEL}@{judge.base_url}"}
        )
        result = await _sh(".venv/bin/raven-bot doctor", env, project_dir(tmp_path / "project"))

    line = re.search(r"^  \[(ok  |WARN|FAIL)\] model judge +(.*)$", result.out, re.MULTILINE)
    assert line, result.out
    assert line.groups() == ("ok  ", f"openai:{LOCAL_MODEL} answers (from {ROLE_SETTING})"), line[0]
    assert any(r["path"] == "/v1/models" for r in judge.requests), judge.requests
    # The Host's model has no key here: a warning, not a failure.
    assert re.search(r"^  \[WARN\] model +offline mode", result.out, re.MULTILINE), result.out
    assert result.code == 0, result.both


def test_doctor_fails_on_an_unreachable_provider_with_its_credentials_masked(
    tmp_path: Path,
) -> None:
    url = f"http://ops:{SECRET}@127.0.0.1:{_closed_port()}/v1"
    env = product_env(_home(tmp_path), RAVEN_MODEL=f"openai:{LOCAL_MODEL}@{url}")
    result = sh(".venv/bin/raven-bot doctor", env=env, cwd=project_dir(tmp_path / "project"))

    assert result.code == 1, result.both
    line = re.search(r"^  \[FAIL\] model +(.*)$", result.out, re.MULTILINE)
    assert line, result.out
    masked = url.replace(f"ops:{SECRET}", "****")
    assert masked in line[1], line[0]
    _, checks = result.out.split("\nChecks:\n")
    assert SECRET not in checks + result.err, checks
    assert re.search(r"^FAILED: .*\bmodel\b", result.out, re.MULTILINE), result.out


def test_doctor_masks_credentials_in_a_model_entry_in_its_configuration(tmp_path: Path) -> None:
    url = f"http://ops:{SECRET}@127.0.0.1:{_closed_port()}/v1"
    env = product_env(
        _home(tmp_path),
        RAVEN_MODEL=f"openai:{LOCAL_MODEL}@{url}",
        RAVEN_MODEL_FALLBACKS=f"openai:second@{url}",
        RAVEN_MODEL_JUDGE=f"openai:judge@{url}",
    )
    result = sh(".venv/bin/raven-bot doctor", env=env, cwd=project_dir(tmp_path / "project"))

    shown, _ = result.out.split("\nChecks:\n")
    assert f"RAVEN_MODEL                    openai:{LOCAL_MODEL}@http://****@127.0.0.1" in shown
    assert SECRET not in result.both, shown


# -- A node's agent falls back, and the run's report says so --------------------------------

GRAPH = {
    "task_summary": "a greeting",
    "nodes": [{"id": "s1", "agent": "research", "template": "Say hello in one line."}],
}
STARTED = "Started the greeting run."
REPORTED = "The greeting run is done."


def _local_model(body: dict[str, Any]) -> dict[str, Any]:
    """The local model every call falls back to: the Host submits GRAPH, then acknowledges it
    and its report; the research agent says hello; the judge accepts; the experience
    learner (no tools) proposes no skill operations."""
    names = tool_names(body)
    if "record_verdict" in names:
        verdict = {"accomplished": True, "evidence": "it said hello"}
        return {"tool_calls": [tool_call("record_verdict", verdict)]}
    if "submit_graph" in names:
        said = json.dumps(body["messages"][-1])
        if "**Run `run_" in said:  # the run report reaching the Host
            return {"content": REPORTED}
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"content": STARTED}
        return {"tool_calls": [tool_call("submit_graph", GRAPH)]}
    if not names:
        return {"content": "[]"}
    return {"content": "hello from the research agent"}


async def test_a_node_answered_by_the_fallback_is_named_in_the_run_report(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    project = project_dir(tmp_path / "project")
    async with FakeAnthropic() as anthropic, FakeOpenAI(models=(LOCAL_MODEL,)) as local:
        # The primary is overloaded for every call of the Host, the agent and the judge.
        for _ in range(20):
            anthropic.queue_error(529, "Overloaded")
        local.responder = _local_model
        env = product_env(
            home,
            ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            ANTHROPIC_BASE_URL=anthropic.base_url,
            RAVEN_MODEL="claude-sonnet-5",
            RAVEN_MODEL_MAX_RETRIES="0",
            RAVEN_MODEL_FALLBACKS=f"openai:{LOCAL_MODEL}@{local.base_url}",
        )
        console = Console(env, project)
        try:
            await asyncio.to_thread(console.expect_text, "you> ")
            console.type("greet me through a research run")
            await asyncio.to_thread(console.expect_text, STARTED)
            # The Host reads the run's report and answers the person.
            await asyncio.to_thread(console.expect_text, REPORTED)
        finally:
            console.close()
        bodies = [json.dumps(r["json"]) for r in local.requests]
        run_id = re.search(r"run_[0-9a-f]{6,}", console.transcript)

    line = f"`s1` was answered by the fallback model openai:{LOCAL_MODEL}: "
    line += "anthropic:claude-sonnet-5 was overloaded"
    # The report the Host read says so in one line ...
    assert sum(json.dumps(line)[1:-1] in body for body in bodies) == 1, bodies
    # ... and so does the one a person reads on the bot's host.
    assert run_id, console.transcript
    shown = await _sh(f"raven-bot runs show {run_id[0]}", env, project)
    assert shown.code == 0, shown.both
    assert line.replace("`", "") in shown.out.replace("`", ""), shown.out
    assert not noise(console.transcript), noise(console.transcript)
    assert "raven-bot error" not in console.transcript, console.transcript
