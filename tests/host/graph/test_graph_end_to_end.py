"""End to end through the assembled runtime and the real Anthropic SDK against a loopback fake:
the Host submits a 4-node graph (two parallel research nodes → code → design); the code node
is judged not accomplished once and continued; the report reaches the conversation; the
records on disk match."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime
from host.graph.records import journal_records
from host.graph.render import MEMORY_HEADING
from host.runtime.messages import InboundMessage
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound
from tests.runtime_kit import chat_runtime, online

GRAPH = {
    "task_summary": "Survey, reproduce and present",
    "background": True,
    "nodes": [
        {
            "id": "research_alg",
            "agent": "research",
            "template": "Survey the algorithms.",
            "summary": "survey algorithms",
        },
        {
            "id": "research_bench",
            "agent": "research",
            "template": "Survey the benchmarks.",
            "summary": "survey benchmarks",
        },
        {
            "id": "code",
            "agent": "code",
            "deps": ["research_alg", "research_bench"],
            "template": "Reproduce using {{research_alg.output}} and {{research_bench.output}}.",
            "summary": "reproduce",
        },
        {
            "id": "design",
            "agent": "design",
            "deps": ["code"],
            "template": "Build a page from {{code.output}}.",
            "summary": "report page",
        },
    ],
}


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            parts.append(inner if isinstance(inner, str) else json.dumps(inner))
    return "\n".join(parts)


class Script:
    """Answers by role: Host turns, specialists and the judge (requests arrive concurrently)."""

    def __init__(self) -> None:
        self.judged_code = 0
        self.host_calls: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = body.get("system")
        system_text = system if isinstance(system, str) else json.dumps(system)
        last = _text_of(body["messages"][-1])
        first = _text_of(body["messages"][0])
        if "You judge whether an agent accomplished" in system_text:
            if "Reproduce using" in last and self.judged_code == 0:
                self.judged_code += 1
                return _tool(
                    "record_verdict",
                    {
                        "accomplished": False,
                        "category": "missing_user_input",
                        "missing": "which dataset to use",
                        "evidence": "asked for a dataset",
                    },
                )
            return _tool("record_verdict", {"accomplished": True, "evidence": "output present"})
        if "You are Raven, the Host Agent" in system_text:
            self.host_calls.append(last)
            if "Exception in run" in last:
                run_id = last.split("`")[1]
                return _tool(
                    "resolve_exception",
                    {
                        "run_id": run_id,
                        "node_id": "code",
                        "action": "continue",
                        "message": "Use the public dataset.",
                    },
                )
            if "Run `" in last and "completed" in last and "research_alg" in last:
                return {"content": "All four nodes completed; the page is ready."}
            if body["messages"][-1]["role"] == "user" and "tool_result" in json.dumps(
                body["messages"][-1]
            ):
                return {"content": "Working on it."}
            return _tool("submit_graph", GRAPH)
        # Specialists: an output that names the task.
        task = first.splitlines()[0] if first else "task"
        if "Message from the Host" in first or "Use the public dataset" in last:
            return {"content": f"Reproduced with the public dataset. ({task})"}
        return {"content": f"Result for: {task}"}


async def _ask(runtime: Runtime, thread: str, text: str) -> InboundMessage:
    """A person's request in its own thread, taken in and its turn finished."""
    msg = inbound(text, "e1", thread=thread)
    turn = await runtime.service.accept(msg)
    assert turn is not None
    await turn
    return msg


def _tool(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [
            {
                "type": "tool_use",
                "id": f"toolu_{abs(hash(json.dumps(payload)))}",
                "name": name,
                "input": payload,
            }
        ]
    }


@pytest.fixture
async def runtime_with_fake(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[FakeAnthropic, FakeChatAdapter, Runtime]]:
    async with online(monkeypatch) as fake:
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            await runtime.broker.recover()
            yield fake, adapter, runtime


async def test_four_node_graph_with_one_continue(
    runtime_with_fake: tuple[FakeAnthropic, FakeChatAdapter, Runtime],
) -> None:
    fake, adapter, runtime = runtime_with_fake
    script = Script()
    fake.responder = script
    msg = await _ask(runtime, "T1", "Survey, reproduce and present it.")
    await runtime.service.quiesce(msg.conversation)
    await eventually(lambda: any("All four nodes completed" in t for t in adapter.texts))

    runs = await runtime.runs.store.runs(msg.conversation.id)
    assert len(runs) == 1
    run = runs[0]
    assert run.state == "completed"
    nodes = {n.node_id: n for n in await runtime.runs.store.nodes_of_run(run.id)}
    assert {k: v.state for k, v in nodes.items()} == dict.fromkeys(GRAPH_IDS, "completed")
    assert nodes["code"].attempts == 2
    assert nodes["research_alg"].attempts == 1
    # The report reached the conversation (as the Host's proactive turn), once.
    assert sum("All four nodes completed" in t for t in adapter.texts) == 1
    # Records on disk match SQLite.
    run_dir = run.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["state"] == "completed"
    assert {k: v["state"] for k, v in manifest["nodes"].items()} == {
        k: v.state for k, v in nodes.items()
    }
    graph = json.loads((run_dir / "graph.json").read_text())
    assert [n["id"] for n in graph["nodes"]] == GRAPH_IDS
    # Both attempts of the continued node are in the run's journal; its output file holds
    # the accepted one.
    records = journal_records(run_dir / "journal.jsonl")
    code = records["code"]
    assert sorted(code.attempts) == [1, 2]
    for attempt in code.attempts.values():
        assert attempt.prompt and attempt.output is not None and attempt.transcript
    assert "Use the public dataset." in (code.attempt(2).prompt or "")
    assert nodes["code"].output_path == run_dir / "outputs" / "code.md"
    assert (run_dir / "outputs" / "code.md").read_text() == code.attempt(2).output
    assert (run_dir / "memory" / "code.md").exists()
    design_prompt = records["design"].latest.prompt or ""
    assert "Reproduced with the public dataset" in design_prompt
    assert "<untrusted-data" in design_prompt
    # The research nodes ran before code; design saw the continued code output.
    assert nodes["code"].judge_calls == 2
    # One status message, edited in place.
    status_posts = [t for t in adapter.texts if t.startswith(f"**Run `{run.id}`**")]
    assert len(status_posts) == 1
    assert adapter.edits


GRAPH_IDS = ["research_alg", "research_bench", "code", "design"]


READING_GRAPH = {
    "task_summary": "Find and build on it",
    "background": True,
    "nodes": [
        {"id": "find", "agent": "research", "template": "Find the dataset.", "summary": "find"},
        {
            "id": "build",
            "agent": "code",
            "deps": ["find"],
            "template": "Build the loader.",
            "summary": "build",
        },
    ],
}


class ReadingScript:
    """The `build` node's agent reads the memory record its prompt names (paper Eq. 32)."""

    def __init__(self) -> None:
        self.tool_results: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = body.get("system")
        system_text = system if isinstance(system, str) else json.dumps(system)
        first = _text_of(body["messages"][0])
        last = _text_of(body["messages"][-1])
        if "You judge whether an agent accomplished" in system_text:
            return _tool("record_verdict", {"accomplished": True, "evidence": "output present"})
        if "You are Raven, the Host Agent" in system_text:
            if "Run `" in last and "completed" in last:
                return {"content": "Both nodes completed."}
            if "tool_result" in json.dumps(body["messages"][-1]):
                return {"content": "Working on it."}
            return _tool("submit_graph", READING_GRAPH)
        if first.startswith("Find the dataset."):
            return {"content": "The dataset is at example.org/data.csv."}
        if len(body["messages"]) == 1:
            listed = first.split(MEMORY_HEADING, 1)[1].split()[0]
            return _tool("read_file", {"path": listed})
        self.tool_results.append(last)
        return {"content": f"Loader built from: {last[:400]}"}


async def test_a_node_reads_the_memory_record_its_prompt_names(
    runtime_with_fake: tuple[FakeAnthropic, FakeChatAdapter, Runtime],
) -> None:
    # The records live under runs/, outside the agent's workspace: before, its file tool
    # refused the path its own prompt gave it.
    fake, adapter, runtime = runtime_with_fake
    script = ReadingScript()
    fake.responder = script
    await _ask(runtime, "T2", "Find the dataset and build a loader.")
    await eventually(lambda: any("Both nodes completed" in t for t in adapter.texts))
    assert len(script.tool_results) == 1
    seen = script.tool_results[0]
    assert "Memory record of node `find`" in seen
    assert "example.org/data.csv" in seen
    assert "outside the workspace" not in seen
