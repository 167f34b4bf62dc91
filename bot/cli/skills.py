"""`raven-bot skills list|search`: the skills the bot can select, how a query ranks them, and
which entries the policy leaves out and why (blocked, unsafe, a hub entry without a verdict)."""

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
from skills.model import SkillHit
from skills.router import LeftOut


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
        return await _search(settings, experience, " ".join(args.query), args.json, out)
    finally:
        await store.close()


async def _list(settings: Settings, experience: ExperienceStore, as_json: bool, out: TextIO) -> int:
    catalog = local_catalog(settings)
    router = skill_router(settings, experience, provider=None, catalog=catalog)
    hits = [(SkillHit("local", s, 0.0), s.origin) for s in await catalog.skills()]
    hits += [
        (SkillHit("memory", s.as_skill(), 0.0), f"experience:{s.agent}")
        for s in await experience.skills()
    ]
    rows = [(h.name, origin, h.skill.description, router.left_out_reason(h)) for h, origin in hits]
    if as_json:
        listed = [
            {"name": n, "source": o, "description": d, "left_out": why} for n, o, d, why in rows
        ]
        out.write(json.dumps(listed, indent=1) + "\n")
        return 0
    for name, origin, description, why in rows:
        note = f"  (left out: {why})" if why else ""
        out.write(f"{name:<24} {origin:<12} {description}{note}\n")
    for path, problem in catalog.load_problems:
        out.write(f"skipped {path}: {problem}\n")
    if settings.skills_hub_url:
        out.write(_HUB_UNSCORED if settings.skills_hub_allow_unscored else _HUB_CLOSED)
    return 0


# The hub lists nothing: it answers queries (`skills search` shows its entries per query).
_HUB_CLOSED = (
    "hub: searched for each request (`skills search QUERY` shows its entries); an entry"
    " without a safety verdict is left out: set RAVEN_SKILLS_HUB_ALLOW_UNSCORED=true to admit"
    " unscored hub skills\n"
)
_HUB_UNSCORED = (
    "hub: searched for each request (`skills search QUERY` shows its entries); entries"
    " without a safety verdict are admitted (RAVEN_SKILLS_HUB_ALLOW_UNSCORED=true)\n"
)


async def _search(
    settings: Settings, experience: ExperienceStore, query: str, as_json: bool, out: TextIO
) -> int:
    ranking = await skill_router(settings, experience, provider=None).ranking(query)
    why = {entry.qid: entry.reason for entry in ranking.left_out}
    results: list[dict[str, Any]] = [
        {
            "name": c.name,
            "qid": c.hit.qid,
            "rrf": round(c.score, 6),
            "ranks": {source: list(ranks) for source, ranks in c.ranks.items()},
            "description": c.hit.skill.description,
            "left_out": why.get(c.hit.qid),
        }
        for c in ranking.fused
    ]
    fused = {c.hit.qid for c in ranking.fused}
    # Entries that never took part in fusion (a hub entry without a usable verdict).
    unfused = [entry for entry in ranking.left_out if entry.qid not in fused]
    if as_json:
        results += [_unfused(entry) for entry in unfused]
        out.write(json.dumps(results, indent=1) + "\n")
        return 0
    for source, error in ranking.source_errors.items():
        out.write(f"skill source {source} failed: {error}\n")
    if not results and not unfused:
        out.write("No skill matches that query.\n")
    for r in results:
        ranks = ", ".join(f"{s} #{'/'.join(map(str, rs))}" for s, rs in r["ranks"].items())
        note = f"  (left out: {r['left_out']})" if r["left_out"] else ""
        out.write(f"{r['rrf']:.5f}  {r['name']:<24} ({ranks})  {r['description']}{note}\n")
    for entry in unfused:
        out.write(f"left out {entry.hit.name} ({entry.qid}): {entry.reason}\n")
    return 0


def _unfused(entry: LeftOut) -> dict[str, Any]:
    return {
        "name": entry.hit.name,
        "qid": entry.qid,
        "rrf": None,
        "ranks": {},
        "description": entry.hit.skill.description,
        "left_out": entry.reason,
    }
