"""A campaign's chart follows its final report into the thread: as a PNG uploaded through the
outbox (recorded, sent once, retried), and as chart data the report message carries for a
platform that draws charts itself (Slack's chart block).

The PNG is drawn (in a worker thread) once the report is posted, written whole into the
campaign's directory and queued under `campaign:<id>:chart-final`, so it comes after the
report and is never doubled. Drawing or uploading it never holds the report back.

The campaign's live status message carries the chart data too, as posted and at every edit
(the rounds so far): plain numbers read from the records, never a PNG per round. Only a
platform that draws charts (Slack) shows it; Discord's status message stays text, its chart
the final report's PNG (an edit there is not recorded or retried as an upload must be).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from core.files import atomic_write
from core.ids import ConversationRef
from host.conversation.run_files import FileQueue
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import ChartData, ChartSeries, OutboundFile
from host.runtime.record_links import RecordLinks, open_line
from oncall.chart import CampaignChart, best_so_far, chart_of, render_chart
from oncall.ports import CampaignNotifier, PostedHook
from oncall.store import CampaignStore

log = logging.getLogger(__name__)

CHART_FILE = "chart-final.png"
# At start, charts owed to reports posted this recently (the process died in between).
RECOVER_SECONDS = 86_400.0
_REPORT_KEY = ("campaign:", ":report")
_STATUS_KEY = ("campaign:", ":status")

Draw = Callable[[CampaignChart], bytes]


class ChartNotices(CampaignNotifier, Protocol):
    """Notices that can carry a chart for platforms that draw it (the lane notifier)."""

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
        """As `CampaignNotifier.send`, with the notice's chart."""
        ...

    async def edit(
        self,
        conv: ConversationRef,
        message_id: str,
        text: str,
        *,
        key: str,
        chart: ChartData | None = None,
    ) -> None:
        """As `CampaignNotifier.edit`, with the message's chart."""
        ...


def final_report_of(idempotency_key: str) -> str | None:
    """The campaign whose final report a notice key is (`campaign:<id>:report`), else None."""
    return _campaign_of(idempotency_key, _REPORT_KEY)


def status_message_of(idempotency_key: str) -> str | None:
    """The campaign whose status message a key is (`campaign:<id>:status`), else None."""
    return _campaign_of(idempotency_key, _STATUS_KEY)


def _campaign_of(idempotency_key: str, shape: tuple[str, str]) -> str | None:
    head, tail = shape
    if idempotency_key.startswith(head) and idempotency_key.endswith(tail):
        campaign_id = idempotency_key[len(head) : -len(tail)]
        return campaign_id if campaign_id and ":" not in campaign_id else None
    return None


def chart_key(campaign_id: str) -> str:
    """The outbox key of a campaign's final chart: one upload per campaign."""
    return f"campaign:{campaign_id}:chart-final"


def chart_data(chart: CampaignChart) -> ChartData | None:
    """The chart as plain data, one category per round: the best value of each round, the
    best so far, and the target and baseline when set; None before any value."""
    pick = min if chart.direction == "min" else max
    rounds = max([chart.rounds, *(p.round for p in chart.points)], default=0)
    per_round: dict[int, float] = {}
    for point in chart.points:
        if math.isfinite(point.value):
            known = per_round.get(point.round)
            per_round[point.round] = point.value if known is None else pick(known, point.value)
    if not per_round or rounds < 1:
        return None
    numbers = range(1, rounds + 1)
    measured = [per_round.get(n) for n in numbers]
    best: list[float | None] = []
    running: list[float] = []
    for value in measured:
        if value is not None:
            running = best_so_far([*running[-1:], value], chart.direction)[-1:]
        best.append(running[-1] if running else None)
    series = [
        ChartSeries(name="best so far", values=tuple(best)),
        ChartSeries(name=chart.metric[:64] or "value", values=tuple(measured)),
    ]
    for name, line in (("target", chart.target), ("baseline", chart.baseline)):
        if line is not None and math.isfinite(line):
            series.append(ChartSeries(name=name, values=(line,) * rounds))
    better = "lower is better" if chart.direction == "min" else "higher is better"
    return ChartData(
        title=f"{chart.campaign_id}: {chart.metric}"[:200],
        x_label="round",
        y_label=f"{chart.metric} ({better})"[:200],
        categories=tuple(f"r{n}" for n in numbers),
        series=tuple(series),
    )


class ChartedNotices:
    """The campaign engine's notifier: notices as `inner` posts them, a final report's chart
    attached after it, and the chart data of the rounds so far on the status message."""

    def __init__(
        self,
        inner: ChartNotices,
        store: CampaignStore,
        files: FileQueue,
        root: Path,
        *,
        log: ConversationLog | None = None,
        draw: Draw = render_chart,
        links: RecordLinks | None = None,
    ) -> None:
        self._inner = inner
        # The viewer's "Open" line on the status message and the report (None: no viewer).
        self._links = links
        self._log = log  # what was posted and queued already (for `recover`)
        self._store = store
        self._files = files
        self._root = root  # RAVEN_HOME/campaigns: a campaign's chart is kept in its folder
        self._draw = draw  # PNG bytes (replaced only by tests)

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
    ) -> None:
        chart = None
        if (campaign_id := final_report_of(idempotency_key)) is not None:
            on_posted = self._then_chart(conv, campaign_id, on_posted)
            chart = await self._chart_data(campaign_id)
            text = self._linked(conv, campaign_id, text)
        elif (campaign_id := status_message_of(idempotency_key)) is not None:
            chart = await self._chart_data(campaign_id)
            text = self._linked(conv, campaign_id, text)
        await self._inner.send(
            conv,
            text,
            idempotency_key=idempotency_key,
            on_posted=on_posted,
            recipient=recipient,
            essential=essential,
            chart=chart,
        )

    async def _chart_data(self, campaign_id: str) -> ChartData | None:
        """The report's chart as data (Slack draws it); None when it has none or cannot be
        read (the report goes out regardless)."""
        try:
            chart = await self.chart_of(campaign_id)
        except Exception:
            log.warning("the chart data of campaign %s was not read", campaign_id, exc_info=True)
            return None
        return chart_data(chart) if chart is not None else None

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        return await self._inner.posted_id(conv, idempotency_key)

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """The status message's edit carries the chart of the rounds so far."""
        campaign_id = status_message_of(key)
        chart = None
        if campaign_id is not None:
            chart = await self._chart_data(campaign_id)
            text = self._linked(conv, campaign_id, text)
        await self._inner.edit(conv, message_id, text, key=key, chart=chart)

    def _linked(self, conv: ConversationRef, campaign_id: str, text: str) -> str:
        """A notice with the viewer's "Open" line under it (as it is without a viewer)."""
        if self._links is None:
            return text
        url = self._links.campaign(conv, campaign_id)
        return f"{text}\n\n{open_line(f'Open campaign {campaign_id}', url)}"

    async def chart_of(self, campaign_id: str) -> CampaignChart | None:
        """What the campaign's chart shows, from its records (None: no such campaign)."""
        record = await self._store.get(campaign_id)
        if record is None:
            return None
        rounds = await self._store.rounds(campaign_id)
        return chart_of(record, rounds, await self._store.measurements(campaign_id))

    async def recover(self, *, now: float) -> int:
        """At start: queue the charts of final reports posted before the process died, its
        chart not yet recorded (the hook that queues it runs after the post). How many."""
        if self._log is None:
            return 0
        queued = 0
        for record in await self._store.recent(limit=50):
            closed = record.closed_at
            if record.state not in ("closed", "failed") or closed is None:
                continue
            if now - closed > RECOVER_SECONDS:
                continue
            report = await self._log.outbound(f"campaign:{record.id}:report")
            if report is None or report.delivery != "sent":
                continue
            if await self._log.outbound(f"{chart_key(record.id)}:0") is not None:
                continue  # recorded: the outbox sends it (or did)
            queued += await self.attach_chart(record.conversation, record.id)
        return queued

    def _then_chart(
        self, conv: ConversationRef, campaign_id: str, then: PostedHook | None
    ) -> PostedHook:
        async def posted(message_id: str) -> None:
            if then is not None:
                await then(message_id)
            await self.attach_chart(conv, campaign_id)

        return posted

    async def attach_chart(self, conv: ConversationRef, campaign_id: str) -> bool:
        """Draw the campaign's chart and queue it for the thread; False (logged) when it has
        no values or cannot be drawn or recorded."""
        try:
            chart = await self.chart_of(campaign_id)
            if chart is None or not chart.points:
                return False
            path = self._root / campaign_id / CHART_FILE
            data = await asyncio.to_thread(self._draw, chart)
            await asyncio.to_thread(atomic_write, path, data)
            file = OutboundFile(
                name=f"{_safe(campaign_id)}-chart.png",
                path=path.resolve(),
                size=len(data),
                content_type="image/png",
            )
            await self._files.attach(conv, (file,), key=chart_key(campaign_id))
        except Exception:
            log.warning("the chart of campaign %s was not attached", campaign_id, exc_info=True)
            return False
        return True


def _safe(campaign_id: str) -> str:
    return "".join(c for c in campaign_id if c.isalnum() or c in "-_")[:64] or "campaign"


__all__ = [
    "CHART_FILE",
    "ChartedNotices",
    "chart_data",
    "chart_key",
    "final_report_of",
    "status_message_of",
]
