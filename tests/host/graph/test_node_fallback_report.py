"""A node a fallback model answered: the real executor runs it on the in-process backend over
a `FallbackProvider` whose primary gets a 529 from the loopback Anthropic fake; the node's
row keeps which model answered and why (read back from SQLite after the store is reopened),
and the run report says so in one line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agents.backends.inproc import InProcessBackend
from agents.models.anthropic_provider import AnthropicProvider
from agents.models.fallback import FallbackProvider
from agents.registry import AgentEntry
from agents.specialists import default_specialists
from bot.schema import all_migrations
from core.store import Store
from host.graph.executor import GraphRun
from host.graph.judge import CompletionJudge
from host.graph.records import RunFiles
from host.graph.report_loader import load_report
from host.graph.run_store import RunStore
from host.graph.runs import RunAids, RunManager, RunParts, RunSettings
from host.runtime.events import EventBus
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.graph_kit import (
    CONV,
    FakeClock,
    ScriptedJudgeProvider,
    graph_registry,
    guarded,
    node,
)

API_KEY = "sk-ant-test-0123456789abcdef"
NOTE = "answered by the fallback model anthropic:b: anthropic:a was overloaded"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy in the environment would swallow loopback traffic or reach for the internet.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def _model(fake: FakeAnthropic, model: str) -> AnthropicProvider:
    # max_retries=0: the SDK's own retries would answer the 529 before the chain moves on.
    return AnthropicProvider(
        api_key=API_KEY, model=model, base_url=fake.base_url, timeout=5.0, max_retries=0
    )


@asynccontextmanager
async def _manager(root: Path, provider: FallbackProvider) -> AsyncIterator[RunManager]:
    """The real run manager over SQLite at `root`, its in-process agents on `provider`."""
    store = Store(root / "db" / "raven.db", all_migrations())
    await store.open()
    specialists = default_specialists()
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)

    def backend(entry: AgentEntry) -> InProcessBackend:
        return InProcessBackend(provider, specialists[entry.role])

    bus = EventBus()
    bus.freeze()
    clock = FakeClock()
    manager = RunManager(
        RunParts(
            store=RunStore(store, clock=clock),
            files=RunFiles(root / "runs"),
            registry=graph_registry(),
            # The judge is not under test: scripted, it finds every attempt accomplished.
            judge=CompletionJudge(ScriptedJudgeProvider(), timeout=10.0),
            backend=backend,
            workspace=lambda conv: workspace,
            bus=bus,
        ),
        host_reachable=True,
        settings=RunSettings(),
        aids=RunAids(),
        clock=clock,
    )
    try:
        yield manager
    finally:
        await guarded(manager.shutdown())
        await store.close()


async def _run_graph(manager: RunManager) -> GraphRun:
    raw = {
        "task_summary": "two notes",
        "nodes": [node("s1"), node("s2", deps=["s1"])],
    }
    result = await manager.submit(CONV, raw, submitted_by="U1")
    assert result.status == "started" and result.run is not None, result
    await guarded(result.run.done.wait())
    await guarded(manager.idle())
    return result.run


async def test_a_node_answered_by_the_fallback_is_recorded_and_reported(tmp_path: Path) -> None:
    async with FakeAnthropic(api_key=API_KEY) as api:
        provider = FallbackProvider(_model(api, "a"), [_model(api, "b")])
        # s1 on the primary; s2's primary call is overloaded, and its fallback answers.
        api.queue_text("s1 done")
        api.queue_error(529, "Overloaded")
        api.queue_text("s2 done by b")
        try:
            async with _manager(tmp_path, provider) as manager:
                run = await _run_graph(manager)
        finally:
            await provider.aclose()
        models = [r["json"]["model"] for r in api.requests]
    assert models == ["a", "a", "b"]

    # A fresh store over the same file: what a restart reads.
    store = Store(tmp_path / "db" / "raven.db", all_migrations())
    await store.open()
    try:
        runs = RunStore(store)
        nodes = {n.node_id: n for n in await runs.nodes_of_run(run.id)}
        chat = await load_report(runs, run.id, audience="chat")
        host = await load_report(runs, run.id, audience="host")
    finally:
        await store.close()
    assert {n: (r.state, r.fallback) for n, r in nodes.items()} == {
        "s1": ("completed", None),
        "s2": ("completed", NOTE),
    }
    line = f"`s2` was {NOTE}"
    for report in (chat, host):
        assert line in report.splitlines(), report
        assert "`s1` was answered" not in report
