"""Agent backends: in-process loop, command-line process, model APIs; specialists; factory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agents.backends import (
    AcpProcesses,
    AgentTask,
    ApiBackend,
    BackendUnavailable,
    CommandLineBackend,
    InProcessBackend,
    build_backend,
)
from agents.backends.acp.backend import AcpBackend
from agents.models.offline import OfflineProvider
from agents.models.types import (
    Message,
    ModelError,
    ModelReply,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
)
from agents.registry import AgentEntry, default_registry
from agents.sandbox import Refusing
from agents.specialists import default_specialists
from agents.tools import Tool
from agents.workspace_tools import ToolContext
from core.secret_names import SecretNames
from tests.agents.test_agent_loop import ScriptedProvider
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually
from tests.sandboxing import real_sandbox

SPECIALISTS = default_specialists()
# For tests that only build backends: nothing runs through it.
UNUSED = Refusing("not used by this test")


def _entry(name: str = "code", **changes: Any) -> AgentEntry:
    base = AgentEntry(
        name=name,
        description=f"{name} agent",
        backend="inproc",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role="code",
    )
    return dataclasses.replace(base, **changes)


def _cli(*command: str, **changes: Any) -> AgentEntry:
    return _entry("tool", backend="cli", stateful=False, progress=False, command=command, **changes)


def _task(entry: AgentEntry, workspace: Path, prompt: str = "do it", **kw: Any) -> AgentTask:
    return AgentTask(node_id="n1", agent=entry, prompt=prompt, workspace=workspace, **kw)


def _text(text: str) -> ModelReply:
    return ModelReply(
        content=[TextBlock(text=text)], stop_reason="end_turn", usage=Usage(output_tokens=2)
    )


def _tool(name: str, **args: Any) -> ModelReply:
    call = ToolCall(id=f"call_{name}", name=name, input=args)
    return ModelReply(content=[call], stop_reason="tool_use", usage=Usage(input_tokens=7))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return (tmp_path / "workspace").resolve()


# -- in-process ------------------------------------------------------------------------------


async def test_inproc_runs_the_specialist_with_tools_in_the_workspace(workspace: Path) -> None:
    provider = ScriptedProvider(
        [_tool("write_file", path="hello.py", content="print('hi')\n"), _text("Wrote hello.py")]
    )
    backend = InProcessBackend(provider, SPECIALISTS["code"])
    outcome = await backend.run(_task(_entry(), workspace, "write hello.py"))
    assert outcome.error is None and outcome.output == "Wrote hello.py"
    assert (workspace / "hello.py").read_text() == "print('hi')\n"
    system, _, tools = provider.calls[0]
    assert system == SPECIALISTS["code"].system_prompt
    assert {t.name for t in tools} == {
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search_files",
        "run_shell",
        "run_python",
    }
    assert outcome.model_calls == 2 and outcome.usage == Usage(input_tokens=7, output_tokens=2)
    assert outcome.transcript[0]["name"] == "write_file"


async def test_inproc_continues_a_stateful_session(workspace: Path) -> None:
    provider = ScriptedProvider([_text("first answer"), _text("second answer")])
    backend = InProcessBackend(provider, SPECIALISTS["raven"])
    entry = _entry("raven", role="raven")
    first = await backend.run(_task(entry, workspace, "summarise the plan"))
    assert first.history == [
        Message.user_text("summarise the plan"),
        Message.assistant_text("first answer"),
    ]
    second = await backend.run(
        _task(entry, workspace, "summarise the plan", history=first.history, continuation="more?")
    )
    sent = provider.calls[1][1]
    assert sent == [*first.history, Message.user_text("more?")]
    assert second.output == "second answer"
    assert second.history == [*sent, Message.assistant_text("second answer")]


async def test_inproc_streams_progress(workspace: Path) -> None:
    provider = ScriptedProvider([_tool("list_files"), _text("done")])
    lines: list[str] = []

    async def on_progress(line: str) -> None:
        lines.append(line)

    backend = InProcessBackend(provider, SPECIALISTS["raven"])
    await backend.run(_task(_entry("raven", role="raven"), workspace, on_progress=on_progress))
    assert lines == ["`list_files` {}"]


async def test_inproc_worker_can_ask_the_requester(workspace: Path) -> None:
    provider = ScriptedProvider(
        [_tool("ask_requester", question="Which database?"), _text("Using Postgres.")]
    )
    asked: list[str] = []

    async def ask(question: str) -> str:
        asked.append(question)
        return "Postgres"

    backend = InProcessBackend(provider, SPECIALISTS["code"])
    outcome = await backend.run(_task(_entry(), workspace, ask=ask))
    assert asked == ["Which database?"] and outcome.output == "Using Postgres."
    assert "ask_requester" in [t.name for t in provider.calls[0][2]]
    result = provider.calls[1][1][-1].content[0]
    assert "The requester answered: Postgres" in getattr(result, "content", "")


async def test_inproc_offers_no_ask_tool_when_nobody_can_answer(workspace: Path) -> None:
    provider = ScriptedProvider([_text("ok")])
    await InProcessBackend(provider, SPECIALISTS["code"]).run(_task(_entry(), workspace))
    assert "ask_requester" not in [t.name for t in provider.calls[0][2]]


class RefusingProvider:
    """An offline provider that fails the test if anything calls it."""

    name = "spy-offline"
    offline = True

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        raise AssertionError("offline provider must not be called")


async def test_inproc_offline_never_calls_the_provider(workspace: Path) -> None:
    backend = InProcessBackend(RefusingProvider(), SPECIALISTS["research"])
    prompt = "Compare solvers " + "x" * 300
    outcome = await backend.run(_task(_entry("research", role="research"), workspace, prompt))
    assert outcome.offline and outcome.model_calls == 0 and outcome.error is None
    assert outcome.output == (
        "Offline mode: the `research` agent needs a language model and did not run "
        f"(set ANTHROPIC_API_KEY). Task received: {prompt[:200]}"
    )
    assert outcome.history == []


async def test_inproc_offline_with_the_real_offline_provider(workspace: Path) -> None:
    backend = InProcessBackend(OfflineProvider(), SPECIALISTS["code"])
    outcome = await backend.run(_task(_entry(), workspace, "fix the bug"))
    assert outcome.offline and "Task received: fix the bug" in outcome.output


class FailingProvider(ScriptedProvider):
    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        raise ModelError("Anthropic API call failed with HTTP 529: overloaded")


async def test_inproc_model_errors_become_outcome_errors(workspace: Path) -> None:
    backend = InProcessBackend(FailingProvider([]), SPECIALISTS["code"])
    history = [Message.user_text("earlier"), Message.assistant_text("ok")]
    outcome = await backend.run(_task(_entry(), workspace, history=history))
    assert outcome.error is not None and "HTTP 529" in outcome.error
    assert outcome.history == history  # the session is not damaged by a failed run


# -- command line ----------------------------------------------------------------------------

PY = sys.executable


async def test_cli_stdin_mode_runs_in_the_workspace(workspace: Path) -> None:
    script = "import os, sys; print('got:' + sys.stdin.read()); print('cwd:' + os.getcwd())"
    backend = CommandLineBackend(
        _cli(PY, "-c", script), sandbox=real_sandbox(), secret_names=SecretNames()
    )
    outcome = await backend.run(_task(_cli(PY), workspace, "hello via stdin"))
    assert outcome.error is None
    assert outcome.output.splitlines() == ["got:hello via stdin", f"cwd:{workspace}"]
    assert outcome.model_calls == 0 and not outcome.truncated
    assert outcome.history[-1] == Message.assistant_text(outcome.output)


async def test_cli_arg_mode_passes_the_prompt_as_the_last_argument(workspace: Path) -> None:
    entry = _cli("sh", "-c", 'printf "arg:%s|" "$1"; cat', "agent", prompt_via="arg")
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace, "it's $HOME; `x`"))
    # The prompt arrives verbatim as one argument (no shell expansion), stdin is empty.
    assert outcome.error is None and outcome.output == "arg:it's $HOME; `x`|"


async def test_cli_environment_is_scrubbed(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-fake-token")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-key")
    monkeypatch.setenv("DISCORD_TOKEN", "discord-fake")
    monkeypatch.setenv("SOME_PASSWORD", "hunter2")
    script = "import json, os; print(json.dumps(dict(os.environ)))"
    entry = _cli(PY, "-c", script)
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace))
    env = json.loads(outcome.output)
    # PWD is set by the sandbox (its working directory, the workspace).
    assert set(env) <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TERM",
        "TMPDIR",
        "USER",
        "LC_CTYPE",
        "PWD",
    }
    assert "PATH" in env
    # Granting the agent its own key passes that one key, and nothing else secret.
    entry = _cli(PY, "-c", script, api_key_env="ANTHROPIC_API_KEY")
    env = json.loads(
        (
            await CommandLineBackend(entry, sandbox=real_sandbox(), secret_names=SecretNames()).run(
                _task(entry, workspace)
            )
        ).output
    )
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-fake-key"
    assert "SLACK_BOT_TOKEN" not in env and "DISCORD_TOKEN" not in env
    assert "SOME_PASSWORD" not in env


def sleeper_token() -> str:
    """A unique `sleep` argument, so the host can find a sandboxed process by its command line
    (pids written inside the sandbox are from its own PID namespace)."""
    return f"60.{uuid.uuid4().int % 10**9:09d}"


def pids_running(*argv: str) -> list[int]:
    """Host pids of live (non-zombie) processes whose command line is exactly `argv`."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_text() == wanted and process_alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:  # it exited meanwhile
            continue
    return found


def process_alive(pid: int) -> bool:
    """True while `pid` runs (zombies count as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has already exited


async def test_cli_timeout_kills_the_whole_process_group(workspace: Path) -> None:
    token = sleeper_token()
    entry = _cli("sh", "-c", f"sleep {token} & echo started; wait", timeout_seconds=0.5)
    outcome = await CommandLineBackend(
        entry, kill_grace=0.5, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace))
    assert outcome.error is not None and "timed out after 0.5 s" in outcome.error
    assert outcome.output == "started"
    await eventually(lambda: not pids_running("sleep", token), within=5)


async def test_cli_output_cap_truncates(workspace: Path) -> None:
    script = "print('HEAD' + 'x' * 100_000 + 'TAIL')"
    entry = _cli(PY, "-c", script, output_cap_chars=1000)
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace))
    assert outcome.truncated and outcome.error is None
    assert len(outcome.output) < 1100
    assert outcome.output.startswith("HEAD") and outcome.output.endswith("TAIL")
    assert "bytes of output omitted" in outcome.output


async def test_cli_nonzero_exit_reports_code_and_stderr(workspace: Path) -> None:
    entry = _cli("sh", "-c", "echo partial; echo 'boom: config missing' >&2; exit 7")
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace))
    assert outcome.output == "partial"
    assert outcome.error is not None
    assert "exited with code 7" in outcome.error and "boom: config missing" in outcome.error


async def test_cli_missing_binary_is_an_error_not_a_crash(workspace: Path) -> None:
    entry = _cli("raven-test-no-such-binary", "-p")
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace))
    assert outcome.error is not None and "could not start" in outcome.error


async def test_cli_continuation_carries_the_earlier_session(workspace: Path) -> None:
    entry = _cli("cat")
    first = await CommandLineBackend(entry, sandbox=real_sandbox(), secret_names=SecretNames()).run(
        _task(entry, workspace, "step one")
    )
    second = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, workspace, "step one", history=first.history, continuation="step two"))
    assert "step one" in second.output and second.output.endswith("Now:\nstep two")


# -- API: OpenAI-compatible ------------------------------------------------------------------


class FakeOpenAI:
    """`POST /v1/chat/completions` on 127.0.0.1, recording requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.reply: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "  the answer  "}}
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
        }

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(
            {"path": request.path, "headers": dict(request.headers), "json": await request.json()}
        )
        if self.status != 200:
            return web.json_response(
                {"error": {"message": "model overloaded", "type": "server_error"}},
                status=self.status,
            )
        return web.json_response(self.reply)


@pytest.fixture
async def openai_fake() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield fake, f"http://{host}:{port}/v1"
    await runner.cleanup()


def _openai_entry(base_url: str, **changes: Any) -> AgentEntry:
    settings: dict[str, Any] = {
        "backend": "api",
        "api_style": "openai",
        "model": "qwen-test",
        "base_url": base_url,
        "api_key_env": "LOCAL_LLM_KEY",
        "role": "research",
    }
    return _entry("local", **{**settings, **changes})


async def test_openai_style_api_agent(openai_fake: tuple[FakeOpenAI, str], workspace: Path) -> None:
    fake, base_url = openai_fake
    entry = _openai_entry(base_url)
    backend = ApiBackend(entry, SPECIALISTS["research"], environ={"LOCAL_LLM_KEY": "sk-local-123"})
    history = [Message.user_text("earlier q"), Message.assistant_text("earlier a")]
    outcome = await backend.run(_task(entry, workspace, "the question", history=history))
    assert outcome.error is None and outcome.output == "the answer"
    assert outcome.usage == Usage(input_tokens=11, output_tokens=4) and outcome.model_calls == 1
    (request,) = fake.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-local-123"
    body = request["json"]
    assert body["model"] == "qwen-test"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][-1]["content"] == "the question"
    assert "no tools" in body["messages"][0]["content"]
    assert "tools" not in body
    assert outcome.history[-1] == Message.assistant_text("the answer")


async def test_openai_style_errors_are_reported(
    openai_fake: tuple[FakeOpenAI, str], workspace: Path
) -> None:
    fake, base_url = openai_fake
    fake.status = 503
    entry = _openai_entry(base_url)
    backend = ApiBackend(entry, SPECIALISTS["research"], environ={"LOCAL_LLM_KEY": "sk-local-123"})
    outcome = await backend.run(_task(entry, workspace))
    assert outcome.error is not None
    assert "HTTP 503" in outcome.error and "model overloaded" in outcome.error


async def test_openai_style_unreachable_server(workspace: Path) -> None:
    entry = _openai_entry("http://127.0.0.1:9/v1", api_key_env=None)
    backend = ApiBackend(entry, SPECIALISTS["research"], environ={})
    outcome = await backend.run(_task(entry, workspace))
    assert outcome.error is not None and "could not reach http://127.0.0.1:9/v1" in outcome.error


def test_api_agent_without_its_key_is_unavailable() -> None:
    entry = _openai_entry("http://127.0.0.1:9/v1")
    with pytest.raises(BackendUnavailable, match="LOCAL_LLM_KEY"):
        ApiBackend(entry, SPECIALISTS["research"], environ={})


# -- API: Anthropic-compatible ---------------------------------------------------------------


@pytest.fixture
def notes_workspace(workspace: Path) -> Path:
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("# notes")
    return workspace


async def test_anthropic_style_api_agent_runs_the_loop(notes_workspace: Path) -> None:
    workspace = notes_workspace
    async with FakeAnthropic(api_key="sk-agent-key", model="claude-test") as fake:
        fake.queue_tool_use("list_files", {})
        fake.queue_text("Found notes.md")
        entry = _entry(
            "remote",
            backend="api",
            model="claude-test",
            base_url=fake.base_url,
            api_key_env="REMOTE_AGENT_KEY",
            role="research",
        )
        backend = ApiBackend(
            entry, SPECIALISTS["research"], environ={"REMOTE_AGENT_KEY": "sk-agent-key"}
        )
        try:
            outcome = await backend.run(_task(entry, workspace, "what is here?"))
        finally:
            await backend.aclose()
        requests = await fake.wait_for_requests(2)
    assert outcome.error is None and outcome.output == "Found notes.md"
    assert outcome.model_calls == 2 and outcome.usage.input_tokens > 0
    first, second = (r["json"] for r in requests[:2])
    assert first["model"] == "claude-test"
    assert {t["name"] for t in first["tools"]} == {
        "read_file",
        "list_files",
        "search_files",
        "write_file",
    }
    assert "notes.md" in json.dumps(second["messages"][-1])
    # The fake answers 401 to any other key, so two good replies prove the agent's key was sent.
    sent = {k.lower(): v for k, v in requests[0]["headers"].items()}
    assert "sk-agent-key" in (sent.get("x-api-key", "") + sent.get("authorization", ""))


# -- specialists and the factory -------------------------------------------------------------


def test_default_specialists_are_configurations() -> None:
    tools = {role: s.tools(Path("/tmp")).names() for role, s in SPECIALISTS.items()}
    assert set(tools) == {"raven", "research", "code", "design", "oncall"}
    assert "run_shell" in tools["code"] and "write_file" in tools["code"]
    assert "write_file" in tools["design"] and "run_shell" not in tools["design"]
    assert "check_artifact" in tools["design"] and "run_python" in tools["code"]
    assert tools["raven"] == ["read_file", "list_files", "search_files"] == tools["oncall"]
    assert "Sources" in SPECIALISTS["research"].system_prompt
    assert "no web access" in SPECIALISTS["research"].system_prompt
    assert "campaign tools" in SPECIALISTS["oncall"].system_prompt
    assert "HTML" in SPECIALISTS["design"].system_prompt


def test_research_web_hook_adds_tools() -> None:
    async def search(ctx: ToolContext, args: Any) -> str:
        return "results"

    from pydantic import BaseModel

    class Query(BaseModel):
        q: str

    specialists = default_specialists(
        web_tools=lambda workspace: [Tool("web_search", "Search.", Query, search)]
    )
    research = specialists["research"]
    assert "web_search" in research.tools(Path("/tmp")).names()
    assert "no web access" not in research.system_prompt


def test_build_backend_picks_the_backend() -> None:
    registry = default_registry(which=lambda name: f"/bin/{name}")
    provider = OfflineProvider()
    code = registry.require("code")
    assert isinstance(
        build_backend(
            code,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            secret_names=SecretNames(),
        ),
        InProcessBackend,
    )
    claude = registry.require("claude-code")
    assert isinstance(
        build_backend(
            claude,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            secret_names=SecretNames(),
        ),
        CommandLineBackend,
    )
    acp = _entry("opencode", backend="acp", command=("opencode", "acp"))
    with pytest.raises(BackendUnavailable, match="no ACP process pool"):
        build_backend(
            acp,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            secret_names=SecretNames(),
        )
    pool = AcpProcesses(UNUSED, secret_names=SecretNames())
    assert isinstance(
        build_backend(
            acp,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            acp=pool,
            secret_names=SecretNames(),
        ),
        AcpBackend,
    )
    off = default_registry(which=lambda name: None).get("codex")
    assert off is not None
    with pytest.raises(BackendUnavailable, match="not found on PATH"):
        build_backend(
            off,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            secret_names=SecretNames(),
        )
    with pytest.raises(BackendUnavailable, match="no specialist"):
        build_backend(
            code, provider=provider, specialists={}, sandbox=UNUSED, secret_names=SecretNames()
        )
    api = _entry("remote", backend="api", model="m", api_key_env="NOPE_KEY")
    with pytest.raises(BackendUnavailable, match="NOPE_KEY"):
        build_backend(
            api,
            provider=provider,
            specialists=SPECIALISTS,
            sandbox=UNUSED,
            environ={},
            secret_names=SecretNames(),
        )
    api_ok = build_backend(
        api,
        provider=provider,
        specialists=SPECIALISTS,
        sandbox=UNUSED,
        environ={"NOPE_KEY": "sk-123456789"},
        secret_names=SecretNames(),
    )
    assert isinstance(api_ok, ApiBackend)
    assert os.environ.get("NOPE_KEY") is None


async def test_cancelling_a_cli_run_kills_its_processes(workspace: Path) -> None:
    token = sleeper_token()
    entry = _cli("sh", "-c", f"sleep {token} & wait", timeout_seconds=60)
    run = asyncio.create_task(
        CommandLineBackend(entry, sandbox=real_sandbox(), secret_names=SecretNames()).run(
            _task(entry, workspace)
        )
    )
    await eventually(lambda: bool(pids_running("sleep", token)))
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await eventually(lambda: not pids_running("sleep", token), within=5)
