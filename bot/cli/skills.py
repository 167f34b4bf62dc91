"""`raven-bot skills list|search`: the skills the bot can select, and how a query ranks them."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from bot.home import check_home
from bot.schema import all_migrations
from bot.settings import Settings
from bot.skill_forge import local_catalog, skill_router
from core.store import Store
from host.features.skills.store import ExperienceStore


def skills_command(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """Run one skills action; 0 on success, 2 for a bad setting."""
    try:
        check_home(settings.home)
    except RuntimeError as exc:
        out.write(f"raven-bot: {exc}\n")
        return 2
    return asyncio.run(_run(args, settings, out))


async def _run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = Store(settings.home / "raven.db", all_migrations())
    await store.open()
    try:
        experience = ExperienceStore(store)
        if args.skills_command == "list":
            return await _list(settings, experience, args.json, out)
        return await _search(settings, experience, args.query, args.json, out)
    finally:
        await store.close()


async def _list(settings: Settings, experience: ExperienceStore, as_json: bool, out: TextIO) -> int:
    catalog = local_catalog(settings)
    rows = [(s.name, s.origin, s.description) for s in await catalog.skills()]
    rows += [
        (s.record.name, f"experience:{s.agent}", s.record.description)
        for s in await experience.skills()
    ]
    if as_json:
        out.write(
            json.dumps([{"name": n, "source": o, "description": d} for n, o, d in rows], indent=1)
            + "\n"
        )
    else:
        for name, origin, description in rows:
            out.write(f"{name:<24} {origin:<12} {description}\n")
        for path, problem in catalog.load_problems:
            out.write(f"skipped {path}: {problem}\n")
    return 0


async def _search(
    settings: Settings, experience: ExperienceStore, query: str, as_json: bool, out: TextIO
) -> int:
    fused = await skill_router(settings, experience, provider=None).search(query)
    results: list[dict[str, Any]] = [
        {
            "name": c.name,
            "qid": c.hit.qid,
            "rrf": round(c.score, 6),
            "ranks": {source: list(ranks) for source, ranks in c.ranks.items()},
            "description": c.hit.skill.description,
        }
        for c in fused
    ]
    if as_json:
        out.write(json.dumps(results, indent=1) + "\n")
    elif not results:
        out.write("No skill matches that query.\n")
    else:
        for r in results:
            ranks = ", ".join(f"{s} #{'/'.join(map(str, rs))}" for s, rs in r["ranks"].items())
            out.write(f"{r['rrf']:.5f}  {r['name']:<24} ({ranks})  {r['description']}\n")
    return 0
