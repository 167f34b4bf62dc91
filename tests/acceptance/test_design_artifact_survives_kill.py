"""The `design` agent's artifact reaches its Slack thread as a file exactly once across a
`kill -9`, through the real `raven-bot run` with a model key (the loopback Anthropic fake).

Alice asks for a design; the Host submits a one-node background graph for the in-process
`design` agent, which writes `design.svg` into the conversation's workspace with
`write_file` and finishes; the run's report comes back to the Host, whose reply is posted,
and the SVG follows it as a file. The fake Slack holds one step of the upload while the
bot's database shows the file recorded and not yet sent; the bot is killed there, the fake
lets go, and the bot starts again on the same RAVEN_HOME:

- held at `files.getUploadURLExternal`: Slack never got the file, so the restarted bot
  uploads it;
- held at `files.completeUploadExternal`: Slack shared the file but the bot never heard, so
  the restarted bot finds the share in the thread and does not upload it again.

Either way the thread shows `design.svg` once, with the bytes the agent wrote, and the
Host's reply to the report once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.crash_kit import ALICE, CHANNEL, SCOPES, file_rows
from tests.acceptance.harness import WITHIN, project_dir, serving, slack_env
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

ARTIFACT = "design.svg"
SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 40" role="img">\n'
    "  <title>Toy loss: 0.9 to 0.4</title>\n"
    '  <polyline points="0,4 60,20 120,32" fill="none" stroke="#1f4e79" stroke-width="2"/>\n'
    "</svg>\n"
)
ASK = "<@UBOT> please design a small SVG chart of the toy loss falling from 0.9 to 0.4"
TASK = "Draw the toy loss falling from 0.9 to 0.4 as an SVG chart in design.svg."
GRAPH = {
    "task_summary": "Design an SVG chart of the toy loss",
    "background": True,
    "nodes": [{"id": "chart", "agent": "design", "template": TASK, "summary": "loss chart"}],
}
STARTED = "Started the design; I'll post it here when it is ready."
DESIGNED = f"Created `{ARTIFACT}`: a line chart of the toy loss from 0.9 to 0.4."
NOT_NAMED = "The design agent finished, but no file came back to the thread."
NAMED = f"Attached to this thread: `{ARTIFACT}`"
REPORT_REPLY = "The loss chart is ready: the design agent drew it, and the SVG follows here."

HOST_SYSTEM = "You are Raven, the Host Agent"
DESIGN_SYSTEM = "You are Raven-Design"
JUDGE_SYSTEM = "You judge whether an agent accomplished"
SKILL_LIBRARY_SYSTEM = "You maintain a library of reusable procedures"


# -- the scripted model ------------------------------------------------------------------------


def _system(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    return system if isinstance(system, str) else json.dumps(system)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(message: dict[str, Any]) -> str:
    return "\n".join(str(b.get("text", "")) for b in _blocks(message) if b.get("type") == "text")


def _tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in _blocks(message) if b.get("type") == "tool_result"]


def _tool_use(name: str, args: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A tool call whose id depends on the request alone: the same request, the same answer."""
    digest = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()
    block = {"type": "tool_use", "id": f"toolu_{digest[:24]}", "name": name, "input": args}
    return {"content": [block], "stop_reason": "tool_use"}


def _said(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, str):
        return inner
    return "\n".join(str(b.get("text", "")) for b in inner or [] if isinstance(b, dict))


@dataclass(frozen=True)
class Script:
    """Answers by role, from the request alone (the bot's calls arrive in any order, and the
    skill gate and episode former are the fake's side calls):

    - the Host hands Alice's request to the design agent with `tool`: `submit_graph` (a
      background run: it says it started once the tool answers, and replies REPORT_REPLY to
      the run's report) or `delegate` (a foreground run: it replies REPORT_REPLY to the
      tool's report when that names the attached file);
    - the design agent writes the SVG, then says what it made;
    - the completion judge finds the node accomplished;
    - skill learning from the finished node changes no skill (an empty list);
    - anything else (memory and the like) gets a short plain answer.
    """

    tool: str = "submit_graph"

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = _system(body)
        messages = body.get("messages") or [{}]
        if JUDGE_SYSTEM in system:
            return _tool_use("record_verdict", {"accomplished": True, "evidence": ARTIFACT}, body)
        if SKILL_LIBRARY_SYSTEM in system:
            return _said("[]")
        if DESIGN_SYSTEM in system:
            wrote = any(_tool_results(m) for m in messages if m.get("role") == "user")
            if wrote:
                return _said(DESIGNED)
            return _tool_use("write_file", {"path": ARTIFACT, "content": SVG}, body)
        if HOST_SYSTEM in system:
            return self._host(body, messages[-1])
        return _said("ok")

    def _host(self, body: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
        if results := _tool_results(last):
            if self.tool == "submit_graph":
                return _said(STARTED)
            named = any(NAMED in _result_text(r) for r in results)
            return _said(REPORT_REPLY if named else NOT_NAMED)
        if NAMED in _text(last):
            return _said(REPORT_REPLY)
        if "design a small SVG chart" in _text(last):
            if self.tool == "delegate":
                return _tool_use("delegate", {"agent": "design", "task": TASK}, body)
            return _tool_use("submit_graph", GRAPH, body)
        return _said("ok")


# -- the thread --------------------------------------------------------------------------------


@dataclass
class Thread:
    """Alice's thread with the bot in #general."""

    slack: FakeSlack
    ts: str

    def posts(self) -> list[str]:
        """The text of the bot's posts in the thread."""
        return [
            str(call.args.get("text"))
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == self.ts
        ]

    def replies_to_report(self) -> list[str]:
        return [p for p in self.posts() if REPORT_REPLY in p]


def _designs_started(model: FakeAnthropic) -> int:
    """How many times the design agent was started: its first call, before any tool answer."""
    return sum(
        DESIGN_SYSTEM in _system(r["json"])
        and not any(_tool_results(m) for m in r["json"].get("messages", []))
        for r in model.requests
        if isinstance(r.get("json"), dict)
    )


async def _kill_while_held(
    tmp_path: Path, held_method: str, script: Script = Script()
) -> tuple[FakeSlack, Thread, Path]:
    """Ask for the design (the Host using `script.tool`), hold `held_method`'s answer, kill
    -9 the bot while the SVG is recorded as pending, let the fake go, start the bot again and
    wait until it is sent."""
    home = tmp_path / "home"
    home.mkdir()
    project = project_dir(tmp_path / "project")
    async with FakeSlack(scopes=SCOPES) as slack, FakeAnthropic() as model:
        model.responder = script
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(
            home,
            slack.api_url,
            ANTHROPIC_API_KEY="sk-ant-acceptance-0123456789",
            ANTHROPIC_BASE_URL=model.base_url,
        )
        hold = slack.hold(held_method)
        async with serving(env, project, tmp_path / "before-kill.log") as proc:
            await slack.wait_connected(within=WITHIN)
            thread = Thread(slack, slack.next_ts())
            mention = payloads.app_mention(CHANNEL, ALICE, ASK, thread.ts)
            await slack.send_envelope("events_api", payloads.event_callback(mention))
            await hold.wait_held(within=WITHIN)
            # Between record and send: the file is in the database, not marked sent.
            assert file_rows(home) == [("pending", f"📎 {ARTIFACT}")]
            assert len(thread.replies_to_report()) == 1, thread.posts()
            proc.send_signal(signal.SIGKILL)  # kill -9 the bot alone
            await asyncio.wait_for(proc.wait(), WITHIN)
        await eventually(lambda: slack.open_connections == 0, within=WITHIN)
        hold.release()
        async with serving(env, project, tmp_path / "after-restart.log"):
            await slack.wait_connected(within=WITHIN)
            await eventually(
                lambda: file_rows(home) == [("sent", f"📎 {ARTIFACT}")],
                within=WITHIN,
                what=lambda: f"the file marked sent, got {file_rows(home)}",
                every=0.2,
            )
        # One design, made before the kill: the restart sent its file, it did not redo it.
        assert _designs_started(model) == 1
        started = 1 if script.tool == "submit_graph" else 0
        assert sum(STARTED in p for p in thread.posts()) == started, thread.posts()
        return slack, thread, home


def _assert_shown_once(slack: FakeSlack, thread: Thread) -> None:
    (shared,) = slack.files_in(CHANNEL, thread.ts)
    assert (shared.name, shared.data) == (ARTIFACT, SVG.encode())
    assert len(slack.shared_files) == 1, slack.shared_files
    shares = [m for m in slack.thread(CHANNEL, thread.ts) if m.get("files")]
    assert len(shares) == 1, shares
    assert len(thread.replies_to_report()) == 1, thread.posts()


async def test_a_design_slack_never_got_is_uploaded_once_after_a_kill_9(tmp_path: Path) -> None:
    slack, thread, _ = await _kill_while_held(tmp_path, "files.getUploadURLExternal")
    _assert_shown_once(slack, thread)
    # Asked for an upload URL before the kill and again after it; completed once.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 2
    assert len([c for c in slack.calls_to("files.completeUploadExternal") if c.ok]) == 1


async def test_a_design_slack_shared_before_the_kill_9_is_not_shared_again(
    tmp_path: Path,
) -> None:
    slack, thread, _ = await _kill_while_held(tmp_path, "files.completeUploadExternal")
    _assert_shown_once(slack, thread)
    # The restarted bot found the share in the thread: it never started a second upload.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 1
    assert len(slack.calls_to("files.completeUploadExternal")) == 1


async def test_a_delegated_design_follows_the_reply_once_after_a_kill_9(tmp_path: Path) -> None:
    """`delegate` runs the design in the foreground: its report is the tool's answer, and
    the SVG follows the Host's reply to that turn (regression: only background runs used to
    attach their files, so a delegated design never reached the thread)."""
    slack, thread, _ = await _kill_while_held(
        tmp_path, "files.getUploadURLExternal", Script(tool="delegate")
    )
    _assert_shown_once(slack, thread)
    assert len(slack.calls_to("files.getUploadURLExternal")) == 2
    assert len([c for c in slack.calls_to("files.completeUploadExternal") if c.ok]) == 1
    assert not any(NOT_NAMED in p for p in thread.posts()), thread.posts()
