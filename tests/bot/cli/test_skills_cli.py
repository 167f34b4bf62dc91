"""`raven-bot skills list|search` say which entries the policy leaves out and why: a hub
entry without a safety verdict (against a hub on 127.0.0.1), a blocked skill."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from bot.cli.parsers import parser
from bot.cli.skills import skills_command
from bot.settings import load_settings
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.skill_hub import FakeHub, serving_hub

UNSCORED_HINT = "set RAVEN_SKILLS_HUB_ALLOW_UNSCORED=true to admit unscored hub skills"


def _entry(sid: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "name": name, "description": "Draw an SVG chart from CSV.", **extra}


async def _skills(*argv: str) -> str:
    """One `raven-bot skills …` in a worker thread (it runs its own event loop) while this
    loop serves the hub; its standard output."""
    args = parser().parse_args(["skills", *argv])
    out = io.StringIO()
    code = await asyncio.to_thread(skills_command, args, load_settings(), out)
    assert code == 0, out.getvalue()
    return out.getvalue()


async def _with_hub(monkeypatch: pytest.MonkeyPatch, hub: FakeHub) -> None:
    monkeypatch.setenv("RAVEN_SKILLS_HUB_URL", hub.url)
    hub.answer = {
        "skills": [
            _entry("h-unscored", "chart-wizard"),
            _entry("h-scored", "chart-helper", metadata={"safety": 0.9}),
        ]
    }


async def test_skills_search_shows_a_hub_entry_without_a_verdict_left_out_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving_hub() as hub:
        await _with_hub(monkeypatch, hub)
        text = await _skills("search", "svg chart from csv")
        ranked = json.loads(await _skills("search", "--json", "svg chart from csv"))
    assert hub.queries  # the hub was asked
    assert (
        f"left out chart-wizard (hub/h-unscored): no safety verdict from the hub; {UNSCORED_HINT}"
        in text
    )
    by_qid = {r["qid"]: r for r in ranked}
    assert by_qid["hub/h-scored"]["left_out"] is None and by_qid["hub/h-scored"]["ranks"]
    unscored = by_qid["hub/h-unscored"]
    assert unscored["ranks"] == {} and unscored["rrf"] is None
    assert unscored["left_out"] == f"no safety verdict from the hub; {UNSCORED_HINT}"


async def test_with_unscored_hub_skills_allowed_search_ranks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAVEN_SKILLS_HUB_ALLOW_UNSCORED", "true")
    async with serving_hub() as hub:
        await _with_hub(monkeypatch, hub)
        ranked = json.loads(await _skills("search", "--json", "svg chart from csv"))
    by_qid = {r["qid"]: r for r in ranked}
    assert by_qid["hub/h-unscored"]["left_out"] is None
    assert by_qid["hub/h-unscored"]["ranks"] == {"hub": [1]}


async def test_skills_list_says_why_an_entry_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAVEN_SKILLS_BLOCKED", "svg-chart")
    monkeypatch.setenv("RAVEN_SKILLS_HUB_URL", "http://127.0.0.1:9")  # never asked by `list`
    text = await _skills("list")
    listed = {s["name"]: s for s in json.loads(await _skills("list", "--json"))}
    assert listed["svg-chart"]["left_out"] == "blocked (RAVEN_SKILLS_BLOCKED)"
    assert listed["research-brief"]["left_out"] is None
    (line,) = [ln for ln in text.splitlines() if ln.startswith("svg-chart ")]
    assert line.endswith("(left out: blocked (RAVEN_SKILLS_BLOCKED))")
    (hub_line,) = [ln for ln in text.splitlines() if ln.startswith("hub:")]
    assert "without a safety verdict is left out" in hub_line and UNSCORED_HINT in hub_line


@pytest.mark.slow
async def test_skills_search_takes_the_rest_of_the_line_unquoted(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `memory search` does: `raven-bot skills search svg chart from csv` without quotes.
    async with serving_hub() as hub:
        await _with_hub(monkeypatch, hub)
        env = _env(isolated_env, RAVEN_SKILLS_HUB_URL=hub.url)
        code, out, err = await _run("skills", "search", "svg", "chart", "from", "csv", env=env)
    assert code == 0, err
    assert [q["q"] for q in hub.queries] == ["svg chart from csv"]
    assert "left out chart-wizard (hub/h-unscored)" in out
