"""The viewer's links as the Host makes them: a reply's footer names the run a report is about
and the runs its turn started in its own conversation (at most five); a link's token is left
out of any text a model reads, whatever the base URL; a link is the same text for a whole
hour and opens for at least the configured hours; a campaign's status message and final
report carry its "Open" line, its other notices nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bot.web.links import WebLinks
from bot.web.tokens import LinkKey
from core.ids import ConversationRef
from core.store import Store
from host.conversation.viewer_links import RunLinks, with_footer
from host.features.oncall.charts import ChartedNotices
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.runtime.messages import ChartData
from host.runtime.record_links import without_link_tokens
from oncall.ports import PostedHook

CONV = ConversationRef("test", "W", "C", "T1")
OTHER = ConversationRef("test", "W", "C", "T2")
BASE = "http://127.0.0.1:8787"
HOUR = 3600.0
# Where a run is asked about: created at SINCE or later counts as started by the turn.
SINCE = 1_796_000_000.0


def _links(home: Path, base: str = BASE, *, hours: float = 24.0, now: float = SINCE) -> WebLinks:
    home.mkdir(parents=True, exist_ok=True)
    return WebLinks(LinkKey.load(home), base, hours, clock=lambda: now)


async def _run(store: Store, conv: ConversationRef, run_id: str, created_at: float) -> None:
    """A run row of `conv` created at `created_at` (one pending node)."""
    run = RunRecord(
        id=run_id,
        conversation=conv,
        task_summary="echo",
        background=True,
        state="running",
        submitted_by="U1",
        submission={},
        run_dir=Path("/nonexistent") / run_id,
        replaces_run=None,
        status_message=None,
        created_at=created_at,
        finished_at=None,
    )
    node = NodeRecord(
        conversation_id=conv.id,
        node_id=f"{run_id}_n",
        run_id=run_id,
        agent="echo",
        instance=None,
        summary="echo",
        template="echo",
        deps=(),
        state="pending",
        attempts=0,
        max_attempts=1,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )
    await RunStore(store).create_run(run, [node])


def _ids(footer: str) -> list[str]:
    return re.findall(r"^🔎 \[Open run ([\w-]+)\]\(\S+\)$", footer, flags=re.MULTILINE)


async def test_a_report_turn_links_its_run_and_a_turn_the_runs_it_started(
    store: Store, tmp_path: Path
) -> None:
    links = _links(tmp_path / "home")
    run_links = RunLinks(RunStore(store), links)
    await _run(store, CONV, "run_old", SINCE - 60)
    await _run(store, CONV, "run_new", SINCE)
    await _run(store, CONV, "run_newer", SINCE + 5)
    await _run(store, OTHER, "run_other", SINCE + 1)

    footer = await run_links.footer(CONV, since=SINCE)
    assert _ids(footer) == ["run_newer", "run_new"]
    assert footer.splitlines() == [
        f"🔎 [Open run run_newer]({links.run(CONV, 'run_newer')})",
        f"🔎 [Open run run_new]({links.run(CONV, 'run_new')})",
    ]
    # A report turn's run first, however old; the others once.
    footer = await run_links.footer(CONV, since=SINCE, turn_key="run:run_old:report")
    assert _ids(footer) == ["run_old", "run_newer", "run_new"]
    footer = await run_links.footer(CONV, since=SINCE, turn_key="run:run_new:report")
    assert _ids(footer) == ["run_new", "run_newer"]
    # Any other turn key names no run; a turn that started none gets no footer.
    assert await run_links.footer(CONV, since=SINCE + 10, turn_key="run:run_old:status") == ""
    assert await run_links.footer(CONV, since=SINCE + 10, turn_key="e1") == ""
    # Another conversation's runs never, even when its turn ran at the same time.
    assert _ids(await run_links.footer(OTHER, since=SINCE)) == ["run_other"]
    assert with_footer("done", "") == "done"
    assert with_footer("done", "🔎 x") == "done\n\n🔎 x"


async def test_a_reply_gets_at_most_five_links(store: Store, tmp_path: Path) -> None:
    run_links = RunLinks(RunStore(store), _links(tmp_path / "home"))
    for n in range(7):
        await _run(store, CONV, f"run_{n}", SINCE + n)
    assert _ids(await run_links.footer(CONV, since=SINCE)) == [f"run_{n}" for n in (6, 5, 4, 3, 2)]
    footer = await run_links.footer(CONV, since=SINCE, turn_key="run:run_0:report")
    assert _ids(footer) == ["run_0", "run_6", "run_5", "run_4", "run_3"]


def test_hidden_leaves_out_every_links_token_and_nothing_else(tmp_path: Path) -> None:
    local = _links(tmp_path / "a")
    public = _links(tmp_path / "b", "https://raven.example.com/raven/")
    ours, theirs = local.run(CONV, "run_1"), public.conversation(OTHER)
    token = local.token(CONV)
    plain = (
        "Release v1.2.3 is out; see http://example.com/v/abc/run/x and `v1.x.y`.\n"
        "Ids: run_1, v1.abcdefgh.short"
    )
    text = f"{plain}\nOpen {ours} or <{theirs}|here>; the bare token {token}."
    hidden = without_link_tokens(text)
    assert hidden == (
        f"{plain}\nOpen {BASE}/v/(link)/run/run_1 or "
        "<https://raven.example.com/raven/v/(link)/|here>; the bare token (link)."
    )
    assert without_link_tokens(plain) == plain
    assert without_link_tokens(ours) == f"{BASE}/v/(link)/run/run_1"


def test_links_made_within_an_hour_are_one_text_open_for_the_configured_hours(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    hour_start = 499_000 * HOUR
    early, late = _links(home, now=hour_start + 1), _links(home, now=hour_start + HOUR - 1)
    assert early.run(CONV, "r1") == late.run(CONV, "r1")
    assert early.campaign(CONV, "c1") == late.campaign(CONV, "c1")
    assert _links(home, now=hour_start + HOUR + 1).run(CONV, "r1") != early.run(CONV, "r1")
    key = LinkKey.load(home)
    for hours in (24.0, 0.5, 1.0, 36.25):
        for now in (hour_start, hour_start + 1, hour_start + HOUR - 1):
            grant = key.verify(_links(home, hours=hours, now=now).token(CONV), now=now)
            assert grant.conversation_id == CONV.id
            assert now + hours * HOUR <= grant.expires_at < now + hours * HOUR + HOUR


class _Lane:
    """The lane notifier as `ChartedNotices` sees it: the text of each post and edit."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.edited: list[tuple[str, str]] = []

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
        chart: ChartData | None = None,
    ) -> None:
        self.sent.append((idempotency_key, text))

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        return None

    async def edit(
        self,
        conv: ConversationRef,
        message_id: str,
        text: str,
        *,
        key: str,
        chart: ChartData | None = None,
    ) -> None:
        self.edited.append((key, text))


async def _notices(tmp_path: Path, links: WebLinks | None) -> _Lane:
    """Every kind of notice a campaign sends, through ChartedNotices over a recording lane."""
    lane = _Lane()
    notices = ChartedNotices(
        lane,
        _NoStore(),  # type: ignore[arg-type]
        _NoFiles(),
        tmp_path,
        links=links,
    )

    async def no_chart(campaign_id: str) -> None:
        return None

    notices.chart_of = no_chart  # type: ignore[method-assign]
    await notices.send(CONV, "▶️ round 1", idempotency_key="campaign:c1:status")
    await notices.edit(CONV, "m1", "▶️ round 2", key="campaign:c1:status")
    await notices.send(CONV, "🏁 done", idempotency_key="campaign:c1:report")
    await notices.send(CONV, "🛰️ started", idempotency_key="campaign:c1:started")
    await notices.send(CONV, "⏸️ waiting", idempotency_key="campaign:c1:approval")
    await notices.edit(CONV, "m2", "other", key="run:r1:status")
    return lane


async def test_a_campaigns_status_message_and_report_carry_its_open_line(tmp_path: Path) -> None:
    links = _links(tmp_path / "home")
    line = f"🔎 [Open campaign c1]({links.campaign(CONV, 'c1')})"
    lane = await _notices(tmp_path, links)
    assert lane.sent == [
        ("campaign:c1:status", f"▶️ round 1\n\n{line}"),
        ("campaign:c1:report", f"🏁 done\n\n{line}"),
        ("campaign:c1:started", "🛰️ started"),
        ("campaign:c1:approval", "⏸️ waiting"),
    ]
    assert lane.edited == [
        ("campaign:c1:status", f"▶️ round 2\n\n{line}"),
        ("run:r1:status", "other"),
    ]

    bare = await _notices(tmp_path, None)
    assert bare.sent == [
        ("campaign:c1:status", "▶️ round 1"),
        ("campaign:c1:report", "🏁 done"),
        ("campaign:c1:started", "🛰️ started"),
        ("campaign:c1:approval", "⏸️ waiting"),
    ]
    assert bare.edited == [("campaign:c1:status", "▶️ round 2"), ("run:r1:status", "other")]


class _NoStore:
    """Nothing is read from it: `chart_of` is replaced."""


class _NoFiles:
    async def attach(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no chart is drawn here")
