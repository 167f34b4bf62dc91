"""`raven-bot graph validate` and `raven-bot runs list|show|graph`: offline views of the
runtime (a run's graph as a PNG or SVG picture)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import TextIO

from agents.registry import AgentEntry, RegistryError, load_registry
from bot.console.screen import markdown_for
from bot.home import HomeError, check_home
from bot.schema import all_migrations
from bot.settings import Settings, declared_secret_names
from core.errors import ConfigError
from core.pictures import PictureError, check_destination, save_picture
from core.store import Store
from host.features.mcp.environ import read_mcp_config
from host.features.skills.forge import local_catalog
from host.graph.admission import AdmissionError, admit
from host.graph.model import AdmissionContext
from host.graph.picture import picture_of, render_run
from host.graph.records import NodeRecords, RunFiles
from host.graph.report import node_line
from host.graph.report_loader import load_report
from host.graph.run_store import NodeRecord, RunStore


def validate_graph(path: Path, agents_file: Path | None, settings: Settings, out: TextIO) -> int:
    """Admission of a graph file against the registry: 0 when admitted, 2 otherwise."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        out.write(f"cannot read {path}: {exc.strerror}\n")
        return 2
    except UnicodeDecodeError as exc:
        out.write(
            f"cannot read {path}: not UTF-8 text (byte {exc.start}); save the graph as UTF-8 JSON\n"
        )
        return 2
    if agents_file is not None and not agents_file.is_file():
        # Named explicitly, so a typo must not silently mean "the defaults".
        out.write(f"cannot read {agents_file}: no such file (given with --agents)\n")
        return 2
    try:
        servers = _tool_server_names(settings)
        registry = load_registry(
            agents_file or settings.home / "agents.toml",
            extra=_feature_agents(settings),
            secret_names=declared_secret_names(),
        )
    except (RegistryError, ConfigError) as exc:
        out.write(f"{exc}\n")
        return 2
    ctx = AdmissionContext(
        agents={e.name: e for e in registry.entries()},
        workspace=path.resolve().parent,
        approval_collected=True,
        skills=_skill_names(settings) if settings.skills else None,
        tool_servers=servers,
    )
    try:
        graph = admit(raw, ctx)
    except AdmissionError as exc:
        out.write(f"{exc.for_user()}\n")
        return 2
    note = " (asks for approval before it runs)" if graph.submission.confirm else ""
    out.write(f"admitted: {len(graph.order)} node(s), order {' → '.join(graph.order)}{note}\n")
    return 0


def _feature_agents(settings: Settings) -> list[AgentEntry]:
    """The agents the installed capabilities run themselves, as the bot registers them."""
    from bot.app import FEATURES  # the feature list: only when a graph is validated

    return [entry for kind in FEATURES for entry in kind.agents(settings.home)]


def _tool_server_names(settings: Settings) -> frozenset[str] | None:
    """The tool servers a node's `mcp` override may name: mcp.json's (None: no file)."""
    config = read_mcp_config(settings.home, Path.cwd())
    return None if config is None else frozenset(config.servers)


def _skill_names(settings: Settings) -> frozenset[str]:
    """The skills a node's `skills` override may name: the bot's local catalog."""

    async def names() -> frozenset[str]:
        return frozenset(skill.name for skill in await local_catalog(settings.home).skills())

    return asyncio.run(names())


async def _with_store(settings: Settings) -> tuple[Store, RunStore]:
    store = Store(settings.home / "raven.db", all_migrations())
    try:
        await store.open()
    except (OSError, sqlite3.Error) as exc:
        # Close what did open: a connection thread left running keeps the process alive.
        await store.close()
        raise HomeError(f"RAVEN_HOME={settings.home}: cannot open {store.path}: {exc}") from None
    return store, RunStore(store)


async def _list(settings: Settings, out: TextIO) -> int:
    store, runs = await _with_store(settings)
    try:
        records = await runs.runs(limit=50)
        if not records:
            out.write("No graph runs recorded yet.\n")
        for run in records:
            nodes = await runs.nodes_of_run(run.id)
            done = sum(1 for n in nodes if n.state == "completed")
            out.write(
                f"{run.id}  {run.state:<11} {done}/{len(nodes)} completed  "
                f"{run.conversation.id}  {run.task_summary[:60]}\n"
            )
    finally:
        await store.close()
    return 0


async def _show(settings: Settings, run_id: str, out: TextIO) -> int:
    store, runs = await _with_store(settings)
    try:
        record = await runs.run(run_id)
        if record is None:
            out.write(_no_run(run_id) + "\n")
            return 2
        files = RunFiles(settings.home / "runs")
        # The report is built from records only; no run executes here. Outputs are whole.
        report = await load_report(runs, run_id, audience="terminal")
        journal = await asyncio.to_thread(files.records, run_id)
        where = [
            f"Journal (prompt, output and transcript of every attempt): "
            f"`{files.journal_path(run_id)}`",
            "",
            "Nodes:",
        ]
        for node in await runs.nodes_of_run(run_id):
            where.append(f"- {node_line(node)}")
            where.append(f"  records: {_records(files, node, journal)}")
        out.write(markdown_for(out, report + "\n\n" + "\n".join(where)))
    finally:
        await store.close()
    return 0


def _records(files: RunFiles, node: NodeRecord, journal: dict[str, NodeRecords]) -> str:
    """Where one node's records are: its attempts in the journal, its files by path."""
    attempts = sorted(journal[node.node_id].attempts) if node.node_id in journal else []
    parts = [
        f"attempt{'s' if len(attempts) > 1 else ''} {', '.join(map(str, attempts))} in the journal"
        if attempts
        else "nothing journaled"
    ]
    if node.output_path is not None:
        parts.append(f"output `{node.output_path}`")
        parts.append(f"memory record `{files.memory_beside(node.output_path)}`")
    return "; ".join(parts)


async def _graph(settings: Settings, run_id: str, path: Path | None, out: TextIO) -> int:
    if path is None:
        print("raven-bot: `runs graph` needs --out FILE.png or FILE.svg", file=sys.stderr)
        return 2
    try:
        fmt = check_destination(path)  # before anything is read or drawn
        store, runs = await _with_store(settings)
        try:
            run = await runs.run(run_id)
            nodes = await runs.nodes_of_run(run_id) if run is not None else []
        finally:
            await store.close()
        if run is None:
            print(f"raven-bot: {_no_run(run_id)}", file=sys.stderr)
            return 2
        picture = picture_of(run, nodes)
        save_picture(path, await asyncio.to_thread(render_run, picture, fmt))
    except PictureError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    count = len(picture.nodes)
    out.write(
        f"Wrote {path}: run {run.id} ({run.state}), {count} node{'s' if count != 1 else ''}.\n"
    )
    return 0


def _no_run(run_id: str) -> str:
    return f"No run `{run_id}`; `raven-bot runs list` shows the recorded ones."


def runs_command(
    settings: Settings, action: str, run_id: str | None, *, out: Path | None = None
) -> int:
    """Entry for `raven-bot runs list|show RUN|graph RUN --out FILE`; 2 with one line when
    RAVEN_HOME is unusable."""
    try:
        check_home(settings.home)
        if action == "show":
            assert run_id is not None
            return asyncio.run(_show(settings, run_id, sys.stdout))
        if action == "graph":
            assert run_id is not None
            return asyncio.run(_graph(settings, run_id, out, sys.stdout))
        return asyncio.run(_list(settings, sys.stdout))
    except HomeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
