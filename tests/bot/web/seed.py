"""Records for the viewer's tests: runs (rows and journal) written as the bot writes them,
signed links, and a viewer served on 127.0.0.1 by the real aiohttp server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from aiohttp import web

from bot.web.server import Viewer, ViewerConfig
from bot.web.tokens import Grant, LinkKey
from core.ids import ConversationRef
from core.store import Store
from host.graph.records import RunFiles
from host.graph.run_store import NodeRecord, RunRecord, RunStore

CHANNEL = ConversationRef("slack", "T1", "C1", "1700000000.000100")
OTHER_THREAD = ConversationRef("slack", "T1", "C1", "1700000000.000200")
DM = ConversationRef("slack", "T1", "D1", "D1")


def token(home: Path, conv: ConversationRef, *, expires_in: float = 3600.0) -> str:
    """A signed link token for `conv`'s records (negative `expires_in`: already expired)."""
    return LinkKey.load(home).sign(Grant(conv.id, time.time() + expires_in))


@dataclass(frozen=True)
class SeedNode:
    """A node to write: id, agent, state, dependencies, and what its attempt recorded."""

    id: str
    agent: str = "shell"
    state: str = "completed"
    deps: tuple[str, ...] = ()
    prompt: str = "echo hello"
    output: str | None = "hello"
    transcript: tuple[dict[str, object], ...] = ()
    verdict: dict[str, object] | None = None
    error: str | None = None


async def seed_run(
    store: Store,
    home: Path,
    conv: ConversationRef,
    nodes: Sequence[SeedNode],
    *,
    run_id: str = "r1",
    state: str = "completed",
    summary: str = "say hello",
    finished: bool = True,
) -> RunRecord:
    """A run with `nodes`, its rows and its journal as the executor leaves them."""
    runs, files = RunStore(store), RunFiles(home / "runs")
    now = time.time()
    run = RunRecord(
        id=run_id,
        conversation=conv,
        task_summary=summary,
        background=False,
        state=state,  # type: ignore[arg-type]
        submitted_by="U1",
        submission={},
        run_dir=files.run_dir(run_id),
        replaces_run=None,
        status_message=None,
        created_at=now - 60,
        finished_at=None,
    )
    records = [
        NodeRecord(
            conversation_id=conv.id,
            node_id=n.id,
            run_id=run_id,
            agent=n.agent,
            instance=None,
            summary=n.prompt[:60],
            template=n.prompt,
            deps=n.deps,
            state="pending",
            attempts=0,
            max_attempts=2,
            continuation=None,
            output_path=None,
            error=None,
            verdict=None,
            deadline=None,
        )
        for n in nodes
    ]
    await runs.create_run(run, records)
    settled = [
        r.with_fields(
            state=n.state,
            attempts=1 if n.state != "pending" else 0,
            error=n.error,
            verdict=n.verdict,
            started_at=now - 50,
            finished_at=now - 40 if n.state in ("completed", "failed") else None,
            seconds=10.0,
            model_calls=1,
            input_tokens=100,
            output_tokens=20,
        )
        for r, n in zip(records, nodes, strict=True)
    ]
    await runs.commit_nodes(settled)
    journal = files.open_journal(run_id)
    for n in nodes:
        if n.state == "pending":
            continue
        journal.record("prompt", n.id, 1, text=n.prompt)
        if n.output is not None:
            journal.record("output", n.id, 1, text=n.output)
        if n.transcript:
            journal.record("transcript", n.id, 1, items=list(n.transcript))
    await journal.close()
    if finished:
        await runs.set_run_state(run_id, state, finished=True)  # type: ignore[arg-type]
    return run


@asynccontextmanager
async def serving(store: Store, home: Path, **config: object) -> AsyncIterator[str]:
    """The viewer on 127.0.0.1 (a free port), as the bot serves it: its base URL."""
    async with serving_viewer(store, home, **config) as (base, _):
        yield base


@asynccontextmanager
async def serving_viewer(
    store: Store, home: Path, **config: object
) -> AsyncIterator[tuple[str, Viewer]]:
    """As `serving`, with the Viewer itself (for tests that look at its live watchers)."""
    viewer = Viewer(
        store,
        LinkKey.load(home),
        ViewerConfig(home=home, zone=ZoneInfo("UTC"), **config),  # type: ignore[arg-type]
    )
    runner = web.AppRunner(viewer.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", viewer
    finally:
        await runner.cleanup()
