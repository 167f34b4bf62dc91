"""The real small model's first graph, replayed through the assembled runtime and the real
SDK: written as a fenced JSON block, with `instance: ""` and the skill `research-brief` named
as its agent. The call is recovered, the empty instance is read as absent, and the rejection
reaches the model as an error result that says the agent is a skill and names the agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import inbound
from tests.runtime_kit import chat_runtime, online

GRAPH = {
    "task_summary": "A brief on vector databases, then a comparison script",
    "nodes": [
        {
            "id": "research_1",
            "agent": "research-brief",
            "template": "Research vector databases.",
            "instance": "",
        },
        {
            "id": "code_1",
            "agent": "code",
            "template": "Compare them: {{research_1.output}}",
            "deps": ["research_1"],
            "instance": "",
        },
    ],
}


def _tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    last = request["json"]["messages"][-1]
    return [b for b in last["content"] if b.get("type") == "tool_result"]


async def test_a_written_graph_is_recovered_and_its_rejection_is_an_error(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with online(monkeypatch) as fake:
        call = {"name": "submit_graph", "arguments": GRAPH}
        fake.queue_text(f"Here is the plan.\n```json\n{json.dumps(call)}\n```")
        fake.queue_text("The graph was rejected; I will fix the agent.")
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as rt:
            turn = await rt.service.accept(inbound("brief me on vector databases", "e1"))
            assert turn is not None
            await turn
        host_calls = [r for r in fake.requests if "submit_graph" in json.dumps(r["json"])]
        assert len(host_calls) >= 2
        sent = host_calls[-1]["json"]["messages"]
        # The model's own turn now carries the call as a real tool_use, paired with its result.
        uses = [b for b in sent[-2]["content"] if b.get("type") == "tool_use"]
        assert [u["name"] for u in uses] == ["submit_graph"]
        (result,) = _tool_results(host_calls[-1])
        assert result["tool_use_id"] == uses[0]["id"]
        assert result["is_error"] is True
        text = json.dumps(result["content"])
        assert "`research-brief` is a skill, not an agent" in text
        assert "`code`" in text and "`research`" in text
        assert "instance" not in text  # the empty instance was read as absent
    assert adapter.texts[-1] == "The graph was rejected; I will fix the agent."
