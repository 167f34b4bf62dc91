"""Each role on its own model: the settings that name one, an in-process agent's `model` in
agents.toml, one shared client per model, the offline rule per role, a turn whose judge and
agent each talk to their own loopback server, and `doctor`'s line per role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models.fallback import FallbackProvider
from agents.models.model_spec import ACCEPTED_FORMS
from agents.registry import RegistryError, load_registry
from bot.app import build_runtime, shutdown
from bot.cli.doctor import _check_models
from bot.models import build_role_models
from bot.settings import SettingsError, load_settings
from core.secret_names import SecretNames
from host.graph.judge import JUDGE_SYSTEM
from host.runtime.messages import InboundMessage
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.bot.cli.test_cli_evolve import _tasks
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.openai_server import FakeOpenAI, system_text, tool_call
from tests.helpers import eventually

ANTHROPIC_KEY = "sk-ant-test-role-models-0123456789"
ROLE_SETTINGS = ("RAVEN_MODEL_JUDGE", "RAVEN_MODEL_EPISODES", "RAVEN_MODEL_PROPOSER")


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ROLE_SETTINGS)
def test_a_malformed_role_model_stops_the_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv(setting, "gemini:pro")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    (problem,) = str(raised.value).splitlines()[1:]
    assert problem.strip().startswith(f"{setting}:"), problem
    assert ACCEPTED_FORMS in problem and "'gemini:pro'" in problem


def test_an_unset_role_runs_on_raven_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAVEN_MODEL", "openai:gpt-5")
    monkeypatch.setenv("RAVEN_MODEL_JUDGE", "claude-haiku-4-5")
    settings = load_settings()
    assert settings.role_spec("judge").label == "anthropic:claude-haiku-4-5"
    for role in ("host", "episodes", "proposer"):
        assert settings.role_spec(role).label == "openai:gpt-5", role


# -- agents.toml ------------------------------------------------------------------------------


def _registry_from(home: Path, toml: str) -> Any:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.toml").write_text(toml)
    return load_registry(home / "agents.toml", secret_names=SecretNames())


def test_an_in_process_agent_takes_a_model_in_raven_models_forms(isolated_env: Path) -> None:
    url = "http://127.0.0.1:9/v1"
    registry = _registry_from(isolated_env, f'[agents.research]\nmodel = "openai:small@{url}"\n')
    assert registry.get("research").model == f"openai:small@{url}"
    with pytest.raises(RegistryError) as raised:
        _registry_from(isolated_env, '[agents.research]\nmodel = "gemini:pro"\n')
    said = str(raised.value)
    assert said.startswith(f"{isolated_env / 'agents.toml'}: [agents.research] model: "), said
    assert ACCEPTED_FORMS in said and "\n" not in said


# -- one provider per model, the offline rule per role ----------------------------------------


async def test_roles_naming_one_model_share_its_client_and_each_is_closed_once(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    local = "openai:small@http://127.0.0.1:9/v1"
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("RAVEN_MODEL", "claude-a")
    monkeypatch.setenv("RAVEN_MODEL_JUDGE", "anthropic:claude-a")  # the Host's, spelled out
    monkeypatch.setenv("RAVEN_MODEL_EPISODES", local)
    monkeypatch.setenv("RAVEN_MODEL_PROPOSER", "openai:gpt-5")  # no OpenAI key, no URL
    monkeypatch.setenv("RAVEN_MODEL_FALLBACKS", f"claude-b,{local}")
    registry = _registry_from(isolated_env, f'[agents.research]\nmodel = "{local}"\n')
    models = build_role_models(load_settings(), registry)

    assert models.judge is models.host
    assert models.for_agent(registry.get("research")) is models.episodes
    assert models.for_agent(registry.get("code")) is models.host
    # The offline rule is per role: the proposer has no credentials, the others do.
    assert models.proposer.offline and not models.host.offline
    # Every role has the fallback chain behind it (less its own model); a fallback is the
    # same client a role uses as its own model.
    assert isinstance(models.host, FallbackProvider)
    assert isinstance(models.episodes, FallbackProvider)
    host_chain, episodes_chain = models.host.chain, models.episodes.chain
    names = ["anthropic:claude-a", "anthropic:claude-b", "openai:small"]
    assert [p.name for p in host_chain] == names
    assert [p.name for p in episodes_chain] == ["openai:small", "anthropic:claude-b"]
    assert host_chain[2] is episodes_chain[0] and host_chain[1] is episodes_chain[1]
    assert len(models.shared) == 4  # claude-a, claude-b, the local model, the offline one

    clients = [p._client for p in models.shared if hasattr(p, "_client")]
    assert len(clients) == 3 and not any(c.is_closed() for c in clients)
    await models.aclose()
    assert all(c.is_closed() for c in clients)


# -- a turn: the Host, its agent and the judge on three servers --------------------------------


def _host_script(body: dict[str, Any]) -> dict[str, Any]:
    """The Host delegates once to `raven`, then reports; skills' learning (on the Host's
    model too) learns nothing."""
    if "the Host Agent" not in json.dumps(body.get("system")):
        return {"content": "[]"}
    last = json.dumps(body["messages"][-1].get("content"))
    if "tool_result" in last:
        return {"content": "The raven agent reported back."}
    call = {"agent": "raven", "task": "Say hello to the team."}
    return {
        "content": [
            {"type": "tool_use", "id": "toolu_delegate1", "name": "delegate", "input": call}
        ]
    }


def _agent_script(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": "Hello, team (from the agent's own model)."}


def _judge_script(body: dict[str, Any]) -> dict[str, Any]:
    verdict = {"accomplished": True, "category": "other", "evidence": "it said hello"}
    return {"tool_calls": [tool_call("record_verdict", verdict)]}


async def test_the_judge_and_an_agent_call_only_their_own_servers(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with (
        FakeAnthropic(api_key=ANTHROPIC_KEY) as host,
        FakeOpenAI(models=("judge-model",), side_calls=()) as judge,
        FakeOpenAI(models=("agent-model",), side_calls=()) as agent,
    ):
        host.responder = _host_script
        judge.responder = _judge_script
        agent.responder = _agent_script
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", host.base_url)
        monkeypatch.setenv("RAVEN_MODEL_JUDGE", f"openai:judge-model@{judge.base_url}")
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        _registry_from(
            isolated_env, f'[agents.raven]\nmodel = "openai:agent-model@{agent.base_url}"\n'
        )
        adapter = FakeChatAdapter()
        runtime = await build_runtime(load_settings(), [lambda: adapter])
        try:
            msg = InboundMessage(
                platform="test",
                workspace="W",
                channel="C",
                thread="T1",
                message_id="m1",
                author_id="U1",
                author_name="alice",
                text="Ask raven to greet the team.",
                event_id="e1",
            )
            turn = await runtime.service.accept(msg)
            assert turn is not None
            await turn
            await runtime.service.quiesce(msg.conversation)
            await eventually(lambda: any("reported back" in t for t in adapter.texts))
        finally:
            await shutdown(runtime)

    judged = [r["json"] for r in judge.requests]
    assert judged and all(system_text(b) == JUDGE_SYSTEM for b in judged), judged
    assert all(b["model"] == "judge-model" for b in judged)
    ran = [r["json"] for r in agent.requests]
    assert ran and all(b["model"] == "agent-model" for b in ran)
    assert not any(system_text(b) == JUDGE_SYSTEM for b in ran)
    # The Host's server heard the Host's model's roles only: no verdict, no agent's work.
    hosted = [json.dumps(r["json"]) for r in host.requests]
    assert any("the Host Agent" in h for h in hosted)
    assert not any("record_verdict" in h or "agent-model" in h for h in hosted)
    assert not any(JUDGE_SYSTEM[:60] in h for h in hosted)


async def test_evolution_refuses_when_the_proposers_model_is_offline(
    isolated_env: Path, tmp_path: Path
) -> None:
    # The agent's model (the Host's) has a key; the proposer's names an API without one.
    env = _env(
        isolated_env,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
        RAVEN_MODEL_PROPOSER="openai:gpt-5",
    )
    code, _, err = await _run(
        "evolve", "code", "--tasks", str(_tasks(tmp_path / "t.jsonl")), env=env
    )
    assert code == 2, err
    assert "needs a model: the proposer's model (RAVEN_MODEL_PROPOSER" in err
    assert "`code`'s model" not in err


# -- doctor ------------------------------------------------------------------------------------


async def test_doctor_gives_each_role_a_line_and_calls_each_model_once(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with (
        FakeOpenAI(models=("big",), side_calls=()) as main,
        FakeOpenAI(models=("small",), side_calls=()) as spare,
    ):
        small = f"openai:small@{spare.base_url.replace('http://', 'http://admin:s3cretpass@')}"
        monkeypatch.setenv("RAVEN_MODEL", f"openai:big@{main.base_url}")
        monkeypatch.setenv("RAVEN_MODEL_JUDGE", small)
        monkeypatch.setenv("RAVEN_MODEL_EPISODES", small)
        monkeypatch.setenv("RAVEN_MODEL_PROPOSER", "claude-haiku-4-5")  # no Anthropic key
        _registry_from(isolated_env, f'[agents.research]\nmodel = "{small}"\n')
        checks = {c.name: c for c in await _check_models(load_settings())}
        calls = {"big": len(main.requests), "small": len(spare.requests)}

    names = ["model", "model judge", "model episodes", "model proposer", "model agent research"]
    assert list(checks) == names
    assert checks["model"].level == "ok" and "openai:big" in checks["model"].detail
    for name in ("model judge", "model episodes", "model agent research"):
        assert checks[name].level == "ok", checks[name]
        assert checks[name].detail.startswith("openai:small answers (from "), checks[name]
    assert "RAVEN_MODEL_JUDGE" in checks["model judge"].detail
    assert "agents.toml [agents.research] model" in checks["model agent research"].detail
    proposer = checks["model proposer"]
    assert proposer.level == "warn" and proposer.detail.startswith("offline: ")
    assert (
        "anthropic:claude-haiku-4-5" in proposer.detail and "ANTHROPIC_API_KEY" in proposer.detail
    )
    assert all("s3cretpass" not in c.detail for c in checks.values())
    # Each distinct model was checked once, however many roles name it.
    assert calls["small"] == calls["big"] >= 1
