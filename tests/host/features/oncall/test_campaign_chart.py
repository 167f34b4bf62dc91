"""A finished campaign's chart follows its final report into the thread as a PNG, once, on
Slack (files_upload_v2) and Discord (attachments) through the real SDKs against the loopback
fakes; a chart that cannot be drawn never holds the report back; the chart data a report can
carry has a value per round and the best so far."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.ids import ConversationRef
from host.conversation.outbox import Outbox
from host.features.oncall.charts import ChartedNotices, chart_data, final_report_of
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import ChartData, OutboundFile
from oncall.chart import HEIGHT_PX, WIDTH_PX, CampaignChart, ChartPoint
from oncall.ports import PostedHook
from tests.bot.slack.test_chart_blocks import assert_valid_chart_block
from tests.discord_harness import ALICE, discord_bot
from tests.helpers import approve_campaigns, eventually
from tests.host.conversation.test_run_picture_upload import BytesChannel
from tests.oncall_kit import CONV as KIT_CONV
from tests.oncall_kit import oncall_kit, spec
from tests.slack_harness import CHANNEL, slack_bot

# Each round prints a lower loss than the last (a counter in the campaign's working directory).
IMPROVING = 'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo "loss=$((100-n))"'


def _assert_chart_png(data: bytes) -> None:
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.format == "PNG" and image.size == (WIDTH_PX, HEIGHT_PX)
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50  # not blank


async def test_a_finished_campaign_s_report_gets_its_chart_once_on_slack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.replies_in(ts)
        await bot.settle(ts)
        conv = bot.conversation(ts)
        record = await bot.runtime.campaigns.start("U1", conv, spec(IMPROVING))
        await approve_campaigns(bot.runtime.broker)
        await eventually(lambda: len(bot.fake.uploads.shared) >= 1, within=120)
        (shared,) = bot.fake.uploads.shared
        assert shared.name == f"{record.id}-chart.png"
        assert (shared.channel, shared.thread_ts) == (CHANNEL, ts)
        _assert_chart_png(shared.data)
        # After the report, in the same thread.
        thread = bot.fake.thread(CHANNEL, ts)
        report = [
            i for i, m in enumerate(thread) if f"Campaign `{record.id}` report" in m.get("text", "")
        ]
        shares = [i for i, m in enumerate(thread) if m.get("subtype") == "file_share"]
        assert len(report) == 1 and len(shares) == 1 and report[0] < shares[0]
        # Slack draws the chart itself in the report message: the best so far by round.
        (post,) = [p for p in bot.posts(ts) if f"Campaign `{record.id}` report" in p["text"]]
        blocks = post["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        (chart,) = [b for b in blocks if b["type"] == "data_visualization"]
        assert_valid_chart_block(chart)
        best = chart["chart"]["series"][0]
        assert best["name"] == "best so far"
        losses = [m.value for m in await bot.runtime.campaigns.store.measurements(record.id)]
        assert best["data"][-1]["value"] == min(losses)
        assert len(best["data"]) == len(losses)  # one value a round here
        await bot.settle(ts)
        key = f"campaign:{record.id}:chart-final:0"
        assert await bot.runtime.conversation_log.delivery_of(key) == "sent"
        assert len(bot.fake.uploads.shared) == 1


async def test_a_finished_campaign_s_report_gets_its_chart_once_on_discord(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("hello")
        thread = str(root["id"])
        await bot.settle(thread)
        conv = bot.conversation(thread)
        record = await bot.runtime.campaigns.start(ALICE, conv, spec(IMPROVING))
        await approve_campaigns(bot.runtime.broker, by=ALICE)
        await bot.fake.wait_for(lambda: bool(bot.fake.attachments_in(thread)), timeout=120)
        (attachment,) = bot.fake.attachments_in(thread)
        assert attachment.filename == f"{record.id}-chart.png"
        _assert_chart_png(attachment.data)
        assert any(f"Campaign `{record.id}` report" in t for t in bot.texts(thread))
        await bot.settle(thread)
        key = f"campaign:{record.id}:chart-final:0"
        assert await bot.runtime.conversation_log.delivery_of(key) == "sent"
        assert len(bot.fake.attachments_in(thread)) == 1


class _Lane:
    """The lane notifier as the engine sees it: posts at once and calls the hook."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.charts: list[ChartData | None] = []

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
        self.sent.append(text)
        self.charts.append(chart)
        if on_posted is not None:
            await on_posted("m1")

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        return None

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        return None


class _Files:
    def __init__(self) -> None:
        self.queued: list[tuple[str, Sequence[OutboundFile]]] = []

    async def attach(
        self,
        conv: ConversationRef,
        files: Sequence[OutboundFile],
        *,
        key: str,
        after: str | None = None,
    ) -> None:
        self.queued.append((key, files))


class _Store:
    """Only what `ChartedNotices.chart_of` reads is replaced here (see below)."""


CHART = CampaignChart(
    campaign_id="c1",
    goal="lower the loss",
    metric="loss",
    direction="min",
    points=(ChartPoint(1, 1.0, 9.0), ChartPoint(2, 2.0, 12.0), ChartPoint(3, 3.0, 4.0)),
    rounds=3,
)


async def test_a_chart_that_cannot_be_drawn_leaves_the_report_alone(tmp_path: Path) -> None:
    def broken(chart: CampaignChart) -> bytes:
        raise RuntimeError(f"no fonts for {chart.campaign_id}")

    lane, files = _Lane(), _Files()
    notices = ChartedNotices(lane, _Store(), files, tmp_path, draw=broken)  # type: ignore[arg-type]

    async def chart_of(campaign_id: str) -> CampaignChart:
        return CHART

    notices.chart_of = chart_of  # type: ignore[method-assign]
    conv = ConversationRef("test", "W", "C", "T")
    await notices.send(conv, "📋 report", idempotency_key="campaign:c1:report", essential=True)
    assert lane.sent == ["📋 report"] and files.queued == []
    assert lane.charts == [chart_data(CHART)]  # the data still goes with the report
    # Drawn, it is queued once under the campaign's key.
    notices = ChartedNotices(lane, _Store(), files, tmp_path)  # type: ignore[arg-type]
    notices.chart_of = chart_of  # type: ignore[method-assign]
    await notices.send(conv, "📋 report", idempotency_key="campaign:c1:report", essential=True)
    ((key, (file,)),) = files.queued
    assert key == "campaign:c1:chart-final" and file.name == "c1-chart.png"
    _assert_chart_png(file.path.read_bytes())
    # Other notices get no chart.
    await notices.send(conv, "▶️", idempotency_key="campaign:c1:status")
    assert len(files.queued) == 1


def test_only_a_final_report_key_names_its_campaign() -> None:
    assert final_report_of("campaign:c_1:report") == "c_1"
    assert final_report_of("campaign:c_1:status") is None
    assert final_report_of("campaign::report") is None


def test_chart_data_has_each_round_and_the_best_so_far() -> None:
    data = chart_data(CHART)
    assert data is not None
    assert data.categories == ("r1", "r2", "r3")
    best, measured = data.series
    assert best.name == "best so far" and best.values == (9.0, 9.0, 4.0)
    assert measured.name == "loss" and measured.values == (9.0, 12.0, 4.0)
    assert "lower is better" in data.y_label
    assert chart_data(CampaignChart("c", "g", "loss", "min")) is None


async def test_a_chart_owed_when_the_bot_died_after_the_report_is_sent_once_at_start(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", KIT_CONV, spec(IMPROVING))
        final = await kit.until_final(record.id)
        assert final.state == "closed"
        log = ConversationLog(kit.store)
        # The report went out; the process died before the hook recorded the chart.
        key = f"campaign:{record.id}:report"
        await log.record_outbound(KIT_CONV, idempotency_key=key, text="📋 report")
        await log.mark_delivery(key, "sent", "m1")
        channel = BytesChannel()
        outbox = Outbox(log, {KIT_CONV.platform: channel}, retry_delays=(0.0,))
        lane = _Lane()
        for _ in range(2):  # a second start owes nothing
            charts = ChartedNotices(lane, kit.campaigns, outbox, kit.root, log=log)
            await charts.recover(now=time.time())
            await outbox.idle()
        assert list(channel.uploaded) == [f"{record.id}-chart.png"]
        _assert_chart_png(channel.uploaded[f"{record.id}-chart.png"])
        # Charts are owed for a day after the campaign closed, not forever.
        assert (
            await ChartedNotices(lane, kit.campaigns, outbox, kit.root, log=log).recover(
                now=time.time() + 2 * 86_400
            )
            == 0
        )
