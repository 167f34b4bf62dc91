"""The bot on an OpenAI-compatible model: a Slack turn answered end to end through the real
openai SDK and the loopback fake, and `doctor`'s model check naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.doctor import _check_model
from bot.settings import load_settings
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.openai_server import FakeOpenAI, last_user_text
from tests.slack_harness import slack_bot


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK reads these itself; a developer's shell must not redirect test calls.
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


async def test_a_slack_turn_is_answered_by_a_keyless_local_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeOpenAI() as model:
        model.queue_text("**Hi** from the local model.")
        env = {
            "RAVEN_MODEL": f"openai:qwen2.5-coder@{model.base_url}",
            "RAVEN_MODEL_MAX_RETRIES": "0",
        }
        async with slack_bot(monkeypatch, env=env) as bot:
            ts, _ = await bot.mention("hello there")
            (reply,) = await bot.replies_in(ts)
        assert reply["text"] == "*Hi* from the local model."
        (host_call,) = model.requests
        body = host_call["json"]
        assert body["model"] == "qwen2.5-coder"
        assert body["messages"][0]["role"] == "system"
        assert "hello there" in last_user_text(body)
        assert body["tools"] and all(t["type"] == "function" for t in body["tools"])


async def test_a_tool_call_round_trip_through_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI(api_key="sk-test-openai-0123456789") as model:
        async with slack_bot(
            monkeypatch,
            env={
                "RAVEN_MODEL": "openai:gpt-fake",
                "OPENAI_API_KEY": "sk-test-openai-0123456789",
                "OPENAI_BASE_URL": model.base_url,
                "RAVEN_MODEL_MAX_RETRIES": "0",
            },
        ) as bot:
            call_id = model.queue_tool_call("no_such_tool", {"x": 1})
            model.queue_text("Done after the tool.")
            ts, _ = await bot.mention("use a tool")
            (reply,) = await bot.replies_in(ts)
        assert reply["text"] == "Done after the tool."
        second = model.requests[1]["json"]["messages"]
        tool_messages = [m for m in second if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_messages] == [call_id]
        assert second[second.index(tool_messages[0]) - 1]["tool_calls"][0]["id"] == call_id


async def test_doctor_names_the_provider_and_masks_url_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeOpenAI(models=("qwen2.5-coder",), side_calls=()) as model:
        monkeypatch.setenv("RAVEN_MODEL", f"openai:qwen2.5-coder@{model.base_url}")
        check = await _check_model(load_settings())
    assert check.level == "ok", check.detail
    assert "openai:qwen2.5-coder" in check.detail and model.base_url in check.detail
    unreachable = model.base_url.replace("http://", "http://admin:s3cretpass@")
    monkeypatch.setenv("RAVEN_MODEL", f"openai:qwen2.5-coder@{unreachable}")
    check = await _check_model(load_settings())
    assert check.level == "fail"
    assert "openai:qwen2.5-coder" in check.detail and "s3cretpass" not in check.detail
    assert model.base_url.removeprefix("http://") in check.detail


async def test_doctor_checks_each_fallback_model_too(monkeypatch: pytest.MonkeyPatch) -> None:
    async with (
        FakeOpenAI(models=("qwen2.5-coder",), side_calls=()) as model,
        FakeOpenAI(models=("small",), side_calls=()) as spare,
    ):
        gone = spare.base_url.replace("http://", "http://admin:s3cretpass@")
        monkeypatch.setenv("RAVEN_MODEL", f"openai:qwen2.5-coder@{model.base_url}")
        monkeypatch.setenv(
            "RAVEN_MODEL_FALLBACKS", f"openai:small@{spare.base_url},openai:big@{gone}/nope"
        )
        check = await _check_model(load_settings())
    # The primary answers; of the fallbacks one answers and one does not: a warning.
    assert check.level == "warn", check.detail
    assert "fallback openai:small answers" in check.detail
    assert "fallback openai:big:" in check.detail and "s3cretpass" not in check.detail


async def test_doctor_says_which_key_an_offline_openai_model_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAVEN_MODEL", "openai:gpt-5")
    check = await _check_model(load_settings())
    assert check.level == "warn" and "openai:gpt-5" in check.detail
    assert "OPENAI_API_KEY" in check.detail


async def test_raven_bot_chat_answers_through_an_openai_key(isolated_env: Path) -> None:
    key = "sk-test-openai-chat-0123456789"
    async with FakeOpenAI(api_key=key) as model:
        model.queue_text("Hello from the OpenAI-compatible fake.")
        env = _env(
            isolated_env,
            RAVEN_MODEL="openai:gpt-fake",
            OPENAI_API_KEY=key,
            OPENAI_BASE_URL=model.base_url,
        )
        code, out, err = await _run("chat", stdin=b"hi there\n", env=env)
    assert code == 0, err
    assert "raven> Hello from the OpenAI-compatible fake." in out
    (request,) = model.requests
    assert last_user_text(request["json"]).endswith("hi there")
    assert key not in out + err
