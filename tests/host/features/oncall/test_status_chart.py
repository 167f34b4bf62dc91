"""A campaign's live status message carries the chart of its rounds so far where the platform
draws charts itself: on Slack its post and every `chat.update` carry the chart block (through
the real SDK against the loopback fake); other notices and edits carry none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.ids import ConversationRef
from host.features.oncall.charts import ChartedNotices, chart_data, status_message_of
from host.runtime.messages import ChartData
from oncall.chart import CampaignChart, ChartPoint
from oncall.model import FINAL_STATES
from oncall.ports import PostedHook
from tests.bot.slack.test_chart_blocks import assert_valid_chart_block
from tests.helpers import approve_campaigns, eventually
from tests.oncall_kit import spec
from tests.slack_harness import CHANNEL, slack_bot

IMPROVING = 'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo "loss=$((100-n))"'

CHART = CampaignChart(
    campaign_id="c1",
    goal="lower the loss",
    metric="loss",
    direction="min",
    points=(ChartPoint(1, 1.0, 9.0), ChartPoint(2, 2.0, 4.0)),
    rounds=2,
)


class _Lane:
    """The lane notifier as `ChartedNotices` sees it: what each post and edit carried."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, ChartData | None]] = []
        self.edited: list[tuple[str, ChartData | None]] = []

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
        self.sent.append((idempotency_key, chart))

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
        self.edited.append((key, chart))


class _Store:
    """Nothing is read from it: `chart_of` is replaced below."""


async def test_the_status_message_s_post_and_edits_carry_the_chart(tmp_path: Path) -> None:
    lane = _Lane()
    notices = ChartedNotices(lane, _Store(), _Files(), tmp_path)  # type: ignore[arg-type]
    read: list[str] = []

    async def chart_of(campaign_id: str) -> CampaignChart:
        read.append(campaign_id)
        return CHART

    notices.chart_of = chart_of  # type: ignore[method-assign]
    conv = ConversationRef("test", "W", "C", "T")
    await notices.send(conv, "▶️ round 1", idempotency_key="campaign:c1:status", essential=True)
    await notices.edit(conv, "m1", "▶️ round 2", key="campaign:c1:status")
    await notices.send(conv, "🛰️ started", idempotency_key="campaign:c1:started")
    await notices.edit(conv, "m2", "other", key="run:r1:status")
    expected = chart_data(CHART)
    assert expected is not None
    assert lane.sent == [("campaign:c1:status", expected), ("campaign:c1:started", None)]
    assert lane.edited == [("campaign:c1:status", expected), ("run:r1:status", None)]
    assert read == ["c1", "c1"]  # only the status message's chart is read


def test_only_a_status_key_names_its_campaign() -> None:
    assert status_message_of("campaign:c_1:status") == "c_1"
    assert status_message_of("campaign:c_1:report") is None
    assert status_message_of("campaign::status") is None
    assert status_message_of("campaign:a:b:status") is None


class _Files:
    async def attach(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a status message queues no file")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = message.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


async def test_slack_status_message_shows_the_rounds_so_far_as_a_chart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.replies_in(ts)
        await bot.settle(ts)
        conv = bot.conversation(ts)
        record = await bot.runtime.campaigns.start("U1", conv, spec(IMPROVING))
        await approve_campaigns(bot.runtime.broker)
        final = await _until_final(bot, record.id)
        assert final.state == "closed"
        await bot.settle(ts)
        status_ts = final.status_message
        assert status_ts is not None
        (status,) = [m for m in bot.fake.thread(CHANNEL, ts) if m.get("ts") == status_ts]
        rounds = len(await bot.runtime.campaigns.store.rounds(record.id))
        assert f"round {rounds}/3 finished" in status["text"]
        # Its last edit drew every round: the best so far ends at the campaign's best.
        (chart,) = [b for b in _blocks(status) if b["type"] == "data_visualization"]
        assert_valid_chart_block(chart)
        best = chart["chart"]["series"][0]
        losses = [m.value for m in await bot.runtime.campaigns.store.measurements(record.id)]
        assert best["name"] == "best so far"
        assert [p["label"] for p in best["data"]] == [f"r{n}" for n in range(1, rounds + 1)]
        assert best["data"][-1]["value"] == min(losses)
        # Every edit of the status message carried a chart (once a value was there).
        updates = [
            c.args
            for c in bot.fake.calls_to("chat.update")
            if c.ok and c.args.get("ts") == status_ts
        ]
        assert updates
        charted = [u for u in updates if any(b["type"] == "data_visualization" for b in _blocks(u))]
        assert charted and charted[-1] == updates[-1]


async def _until_final(bot: Any, campaign_id: str) -> Any:
    store = bot.runtime.campaigns.store

    async def final() -> bool:
        record = await store.get(campaign_id)
        return record is not None and record.state in FINAL_STATES

    await eventually(final, within=120, what="the campaign to end")
    return await store.get(campaign_id)
