"""`raven-bot memory add|search|show|forget|reindex`: one user's memory from the shell."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TextIO

from bot.home import check_home
from bot.schema import all_migrations
from bot.settings import Settings
from core.store import Store
from memory.archive import Archive
from memory.embeddings import Embedder, EmbedderUnavailable, select_embedder
from memory.erasure import UserErasure
from memory.group_store import GroupStore
from memory.index import Hit, HybridIndex
from memory.service import MemoryService

CLI_PLATFORM = "cli:local"


def memory_command(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """Run one memory action; 0 on success, 2 for a bad user or setting."""
    try:
        check_home(settings.home)
        embedder = select_embedder(settings.memory_embedder)
    except (RuntimeError, EmbedderUnavailable) as exc:
        out.write(f"raven-bot: {exc}\n")
        return 2
    return asyncio.run(_run(args, settings, embedder, out))


async def _run(
    args: argparse.Namespace, settings: Settings, embedder: Embedder | None, out: TextIO
) -> int:
    store = Store(settings.home / "raven.db", all_migrations())
    await store.open()
    try:
        # Assembled as the bot assembles it: a rebuild keeps group memory's records, and
        # `forget` erases everything derived from the user (memory.erasure).
        memory = MemoryService(
            Archive(store),
            HybridIndex(embedder, settings.home / "index"),
            sources=(GroupStore(store),) if settings.group_memory else (),
            erasure=UserErasure(store, runs_root=settings.home / "runs"),
        )
        if args.memory_command == "reindex":
            # It rebuilds from SQLite: the files are not read, so none is reported missing.
            await memory.finish_erasures()
        else:
            await memory.load_index()
        code = await _ACTIONS[args.memory_command](memory, args, out)
        await memory.save_index()
        return code
    finally:
        await store.close()


async def _owner(memory: MemoryService, user: str, *, create: bool) -> str | None:
    if user.startswith("user:"):
        return user
    owners = [o for o in await memory.archive.owners() if o.rsplit(":", 1)[-1] == user]
    if len(owners) == 1:
        return owners[0]
    if not owners and create:
        return f"user:{CLI_PLATFORM}:{user}"
    return None


async def _resolve(
    memory: MemoryService, args: argparse.Namespace, out: TextIO, *, create: bool = False
) -> str | None:
    owner = await _owner(memory, args.user, create=create)
    if owner is None:
        known = [o for o in await memory.archive.owners() if o.endswith(f":{args.user}")]
        why = (
            f"{args.user!r} matches several users ({', '.join(known)}); give the full owner key"
            if known
            else f"no memory for user {args.user!r} "
            "(`raven-bot memory add --user ID TEXT` creates it)"
        )
        out.write(f"raven-bot: {why}\n")
    return owner


async def _add(memory: MemoryService, args: argparse.Namespace, out: TextIO) -> int:
    owner = await _resolve(memory, args, out, create=True)
    if owner is None:
        return 2
    note = await memory.remember(owner, args.user, " ".join(args.text), dm=False)
    out.write(f"stored note {note.id} for {owner}\n")
    return 0


async def _search(memory: MemoryService, args: argparse.Namespace, out: TextIO) -> int:
    owner = await _resolve(memory, args, out)
    if owner is None:
        return 2
    recalled = await memory.recall(owner, " ".join(args.query), dm=args.dm, k=10)
    rows = [_row(hit) for hit in recalled.hits]
    if args.json:
        out.write(json.dumps(rows, indent=1) + "\n")
        return 0
    if not rows:
        out.write("no results\n")
    for row in rows:
        out.write(f"{row['score']:.3f}  [{row['kind']}] {row['text']}\n")
        for child in row["children"]:
            out.write(f"         [{child['kind']}] {child['text']}\n")
    return 0


def _row(hit: Hit) -> dict[str, Any]:
    return {
        "id": hit.doc.id,
        "kind": hit.doc.kind,
        "text": hit.doc.text,
        "score": round(hit.score, 4),
        "bm25_rank": hit.ranks[0],
        "dense_rank": hit.ranks[1],
        "children": [_row(child) for child in hit.children],
    }


async def _show(memory: MemoryService, args: argparse.Namespace, out: TextIO) -> int:
    owner = await _resolve(memory, args, out)
    if owner is None:
        return 2
    out.write(f"{owner}\n")
    for note in await memory.archive.notes(owner):
        scope = " (DM only)" if note.scope == "dm" else ""
        out.write(f"- {note.kind} #{note.id} [{note.tag}]{scope}: {note.text}\n")
    for episode in await memory.archive.episodes(owner):
        out.write(f"- episode #{episode.id}: {episode.narrative[:160]}\n")
        for fact in episode.facts:
            out.write(f"    {fact.kind} #{fact.id}: {fact.text}\n")
    return 0


async def _forget(memory: MemoryService, args: argparse.Namespace, out: TextIO) -> int:
    owner = await _resolve(memory, args, out)
    if owner is None:
        return 2
    count = await memory.forget(owner)
    out.write(
        f"forgot {count} record(s) of {owner}; their messages, turns, runs and run records"
        " were erased too and the index rebuilt\n"
    )
    return 0


async def _reindex(memory: MemoryService, args: argparse.Namespace, out: TextIO) -> int:
    count = await memory.reindex()
    mode = memory.index.mode
    out.write(f"reindexed {count} document(s) from SQLite ({mode} recall)\n")
    return 0


_ACTIONS: Mapping[str, Callable[[MemoryService, argparse.Namespace, TextIO], Awaitable[int]]] = (
    MappingProxyType(
        {"add": _add, "search": _search, "show": _show, "forget": _forget, "reindex": _reindex}
    )
)
