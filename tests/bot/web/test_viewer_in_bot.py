"""The viewer as the bot serves it (RAVEN_WEB_PORT): a run's reply, its status message and its
report end with an "Open" link the bot serves; `status` links the conversation's records; a
model never reads a link's token; without the port there is no link, no key and no listener;
a port in use stops the start with the setting named."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app import Runtime
from host.runtime.messages import InboundMessage
from tests.fakes.anthropic_server import echo_last_user_text
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound, write_agents
from tests.runtime_kit import chat_runtime, online

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""
# An "Open" line as the bot posts it: label, then the link (base, token, page).
OPEN_RUN = re.compile(
    r"🔎 \[Open run (?P<id>[\w-]+)\]\((?P<url>http://127\.0\.0\.1:(?P<port>\d+)"
    r"/v/(?P<token>[^/]+)/run/(?P<page>[\w-]+))\)$"
)


def free_port() -> int:
    """A port nothing listens on now (the OS's pick, released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_ports() -> set[int]:
    """The TCP ports this process listens on (its sockets in LISTEN state, from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def _say(rt: Runtime, msg: InboundMessage) -> None:
    """A message taken in and the turn it started finished."""
    turn = await rt.service.accept(msg)
    if turn is not None:
        await turn


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


def _all_texts(adapter: FakeChatAdapter) -> list[str]:
    return adapter.texts + [m.text for _, m in adapter.edits]


@pytest.fixture
async def viewer_bot(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Runtime, FakeChatAdapter, int]]:
    """The offline bot serving the viewer on a free port, with an echoing agent."""
    write_agents(isolated_env, AGENTS)
    port = free_port()
    monkeypatch.setenv("RAVEN_WEB_PORT", str(port))
    adapter = FakeChatAdapter()
    async with chat_runtime(adapter, serving=True) as rt:
        yield rt, adapter, port


async def _one_node_plan(rt: Runtime, adapter: FakeChatAdapter) -> tuple[str, str, str]:
    """An explicit one-node plan run to its report: (run id, the turn's reply, the report)."""
    msg = inbound("a1: echo: one", "e1")
    await _say(rt, msg)
    reply = adapter.texts[0]
    (run,) = await rt.runs.store.runs(msg.conversation.id)
    await eventually(
        lambda: any(t.startswith(f"**Run `{run.id}` completed**") for t in adapter.texts)
    )
    (report,) = [t for t in adapter.texts if t.startswith(f"**Run `{run.id}` completed**")]
    return run.id, reply, report


async def test_a_plan_reply_and_its_report_end_with_a_link_the_bot_serves(
    viewer_bot: tuple[Runtime, FakeChatAdapter, int],
) -> None:
    rt, adapter, port = viewer_bot
    run_id, reply, report = await _one_node_plan(rt, adapter)
    assert reply.startswith(f"Started run `{run_id}` with 1 step"), reply
    for text in (reply, report):
        last = text.splitlines()[-1]
        found = OPEN_RUN.fullmatch(last)
        assert found is not None, text
        assert (found["id"], found["page"], int(found["port"])) == (run_id, run_id, port)
        # A line of its own, after a blank one: it renders as a paragraph under the text.
        assert text.endswith(f"\n\n{last}")
    assert port in listening_ports()
    url = OPEN_RUN.fullmatch(report.splitlines()[-1])["url"]  # type: ignore[index]
    status, page = await _get(url)
    assert status == 200, page
    assert run_id in page and "a1" in page
    # The same link with another run id in its place opens nothing.
    status, _ = await _get(url.replace(f"/run/{run_id}", "/run/run_0000000000"))
    assert status == 404


async def test_a_background_runs_status_message_carries_the_link_on_every_edit(
    viewer_bot: tuple[Runtime, FakeChatAdapter, int],
) -> None:
    rt, adapter, _ = viewer_bot
    run_id, _, _ = await _one_node_plan(rt, adapter)

    def statuses() -> list[str]:
        return [t for t in _all_texts(adapter) if t.startswith(f"**Run `{run_id}`** —")]

    await eventually(
        lambda: any("1/1 settled" in t for t in statuses()), what=lambda: str(adapter.texts)
    )
    await rt.service.quiesce(inbound("x", "x").conversation)
    for text in statuses():
        found = OPEN_RUN.fullmatch(text.splitlines()[-1])
        assert found is not None and found["id"] == run_id, text


async def test_status_links_the_conversations_runs_campaigns_and_schedules(
    viewer_bot: tuple[Runtime, FakeChatAdapter, int],
) -> None:
    rt, adapter, port = viewer_bot
    await _say(rt, inbound("status", "s1"))
    status = adapter.texts[-1]
    found = re.search(
        r"🔎 \[Open this conversation's runs, campaigns and schedules\]"
        rf"\((http://127\.0\.0\.1:{port}/v/[^/]+/)\)",
        status,
    )
    assert found is not None, status
    code, page = await _get(found[1])
    assert code == 200, page


async def test_without_a_port_no_link_no_key_and_nothing_listens(
    isolated_env: Path,
) -> None:
    write_agents(isolated_env, AGENTS)
    before = listening_ports()
    adapter = FakeChatAdapter()
    async with chat_runtime(adapter, serving=True) as rt:
        run_id, reply, report = await _one_node_plan(rt, adapter)
        await _say(rt, inbound("status", "s1"))
        await rt.service.quiesce(inbound("x", "x").conversation)
        # Nothing new listens (a socket an earlier test left may have closed meanwhile).
        assert listening_ports() - before == set()
    texts = _all_texts(adapter)
    assert any(t.startswith("**Status**") for t in texts), texts
    assert reply.startswith(f"Started run `{run_id}`") and report
    assert not any("🔎" in t or "/v/" in t for t in texts), texts
    assert not (isolated_env / "web.key").exists()


async def test_a_port_in_use_stops_the_start_naming_the_setting(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        monkeypatch.setenv("RAVEN_WEB_PORT", str(port))
        with pytest.raises(RuntimeError) as failed:
            async with chat_runtime(FakeChatAdapter(), serving=True):
                pass
    assert f"RAVEN_WEB_PORT={port}" in str(failed.value)
    assert f"127.0.0.1:{port}" in str(failed.value)


GRAPH = {
    "task_summary": "Echo one",
    "background": True,
    "nodes": [{"id": "a1", "agent": "echo", "template": "one", "summary": "echo one"}],
}


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


class Script:
    """The Host plans one echo node, says it started it, reports it, then answers a
    follow-up; the judge accepts every output."""

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        last = _text_of(body["messages"][-1])
        if "You judge whether an agent accomplished" in system:
            verdict = {"accomplished": True, "evidence": "output present"}
            return _tool("record_verdict", verdict)
        if "tool_result" in last:
            return {"content": "I started the echo."}
        if "Run `" in last and "completed" in last:
            return {"content": "The echo said one."}
        if "follow-up" in last:
            return {"content": "It is the run's page."}
        return _tool("submit_graph", GRAPH)


def _strings(value: object) -> list[str]:
    """Every string in a request's JSON (what a model reads, whatever the nesting)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _tool(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": payload}]
    }


async def test_a_model_reply_gets_the_link_under_it_and_no_model_reads_a_token(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_agents(isolated_env, AGENTS)
    port = free_port()
    monkeypatch.setenv("RAVEN_WEB_PORT", str(port))
    monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
    async with online(monkeypatch) as fake:
        fake.responder = Script()
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter, serving=True) as rt:
            msg = inbound("Echo one for me.", "e1")
            await _say(rt, msg)
            (run,) = await rt.runs.store.runs(msg.conversation.id)
            await eventually(lambda: any(t.startswith("The echo said one.") for t in adapter.texts))
            started = next(t for t in adapter.texts if t.startswith("I started the echo."))
            reported = next(t for t in adapter.texts if t.startswith("The echo said one."))
            lines = []
            for text, said in ((started, "I started the echo."), (reported, "The echo said one.")):
                # The model's words as it wrote them, the bot's line under them.
                head, line = text.split("\n\n")
                found = OPEN_RUN.fullmatch(line)
                assert head == said and found is not None and found["id"] == run.id, text
                lines.append(found)
            url, token = lines[-1]["url"], lines[-1]["token"]
            await rt.service.quiesce(msg.conversation)
            before = len(fake.requests)
            # A person pastes the link; the thread's context holds it too.
            await _say(
                rt,
                inbound(f"A follow-up: what is {url} ?", "e2").model_copy(
                    update={"context": f"user-U2: see {url}"}
                ),
            )
            assert adapter.texts[-1] == "It is the run's page."
    asked = [json.dumps(r["json"]) for r in fake.requests]
    read = ["\n".join(_strings(r["json"])) for r in fake.requests[before:]]
    follow_up = [text for text in read if "A follow-up" in text]
    assert follow_up, read
    # The next turn read the thread (an earlier reply with its line, the context, the
    # message), each link with its token left out ...
    shown = url.replace(token, "(link)")
    for text in follow_up:
        assert f"I started the echo.\n\n🔎 [Open run {run.id}]({shown})" in text, text
        assert f"see {shown}" in text and f"what is {shown} ?" in text, text
    # ... and no request ever carried a token.
    assert not [body for body in asked if token in body]


async def test_a_pasted_links_token_reaches_no_model_with_the_viewer_off(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Links posted while the viewer was on stay valid after it is turned off (and
    # `raven-bot web` may serve them): their tokens are left out whatever the settings.
    token = "v1.eyJjIjoidGVzdDpXOkM6VCIsImUiOjE3OTY2NTU2MDB9.VDzVcljq3c8jmXDuIxhpUQzym5_Mz8Pb-3k"
    url = f"http://127.0.0.1:8787/v/{token}/run/r1"
    async with online(monkeypatch) as fake:
        fake.responder = echo_last_user_text
        async with chat_runtime(FakeChatAdapter(), serving=True) as rt:
            await _say(
                rt,
                inbound(f"what is {url} ?", "e1").model_copy(
                    update={"context": f"user-U2: see {url}"}
                ),
            )
    bodies = [json.dumps(r["json"]) for r in fake.requests]
    assert bodies and not [b for b in bodies if token in b]
    assert any("/v/(link)/run/r1" in b for b in bodies)
