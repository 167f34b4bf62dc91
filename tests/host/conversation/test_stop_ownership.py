"""`stop` in a shared thread cancels only what its typist may stop (issue 17, finding 4):
their own requests, graph runs, questions and campaigns; an approver's or admin's stop
cancels everything. The reply says what was left running and whose it is, without
pinging anyone; the recorded stop (what a restart resumes) follows the same rule."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.models.offline import OfflineProvider
from agents.tools import ToolRegistry
from bot.app import Runtime, build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import (
    ConversationConfig,
    ConversationParts,
    ConversationService,
    TurnOutcome,
)
from host.graph.executor import GraphRun
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import ConversationStopped, EventBus
from host.runtime.messages import OutboundMessage
from host.runtime.prompt_record import Prompt
from host.runtime.turn import TurnContext
from oncall.model import FINAL_STATES
from oncall.store import CampaignRecord
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import (
    approve_campaigns,
    db_rows,
    eventually,
    inbound,
)

ALICE, BOB, ADMIN = "UALICE", "UBOB", "UADMIN"
CONV = inbound("x", "x").conversation
AGENTS = """
[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""
CAMPAIGN = (
    "campaign: a long training | machine: local | run: echo loss 1; sleep 60 | "
    "metric: loss min | budget: 10m | poll: 1s"
)


class SlowPlatform(FakeChatAdapter):
    """A platform whose posts of turn replies hang while `hold` is set: the turn posting
    one stays running in its lane, and requests sent meanwhile queue behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        if self.hold and message.idempotency_key.startswith("turn:"):
            self.holding.set()
            await self.release.wait()
        return await super().post(conv, message)


@dataclass
class AliceWork:
    """What Alice has going in the thread when someone types `stop`."""

    campaign: CampaignRecord
    run: GraphRun
    prompt: Prompt
    turn: asyncio.Future[TurnOutcome]


@pytest.fixture
async def bot(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Runtime, SlowPlatform]]:
    # The product defaults (Skill Forge, the default embedder and episode former), with
    # one admin configured.
    monkeypatch.setenv("RAVEN_ADMINS", ADMIN)
    await asyncio.to_thread(isolated_env.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread((isolated_env / "agents.toml").write_text, AGENTS)
    adapter = SlowPlatform()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    yield rt, adapter
    adapter.release.set()
    for record in await rt.campaigns.store.recent(active_only=True):
        await rt.campaigns.stop(record.id, by="test teardown")
    await shutdown(rt)


async def _say(rt: Runtime, text: str, event: str, author: str) -> None:
    turn = await rt.service.accept(inbound(text, event, author))
    assert turn is not None
    await turn


async def _alice_starts_everything(rt: Runtime, adapter: SlowPlatform) -> AliceWork:
    """Alice's campaign (a round sleeping on the local machine), graph run, pending
    question, and a request of hers still running in the lane."""
    await _say(rt, CAMPAIGN, "a1", ALICE)
    await approve_campaigns(rt.broker, by=ALICE)

    async def round_running() -> bool:
        records = await rt.campaigns.store.recent(active_only=True)
        return bool(records) and records[0].state == "running" and records[0].round >= 1

    await eventually(round_running, within=30)
    (campaign,) = await rt.campaigns.store.recent(active_only=True)

    await _say(rt, "a: sleeper: wait a minute", "a2", ALICE)
    await eventually(lambda: bool(rt.runs.live_runs(CONV.id)))
    (run,) = rt.runs.live_runs(CONV.id)
    await eventually(lambda: run.state("a") == "running")

    await _say(rt, "b: sleeper: later\nconfirm", "a3", ALICE)
    (prompt,) = [p for p in await rt.broker.pending(CONV) if p.requester == ALICE]

    adapter.hold = True
    turn = await rt.service.accept(inbound("hello again", "a4", ALICE))
    assert turn is not None
    await adapter.holding.wait()
    assert rt.lanes.status(CONV.id).running is not None
    return AliceWork(campaign, run, prompt, turn)


async def _stop_reply(rt: Runtime, adapter: SlowPlatform, event: str, author: str) -> str:
    assert await rt.service.accept(inbound("stop", event, author)) is None
    return next(t for t in reversed(adapter.texts) if t.startswith("Stopped"))


async def test_a_members_stop_leaves_the_owners_work_and_says_whose_it_is(
    bot: tuple[Runtime, SlowPlatform],
) -> None:
    rt, adapter = bot
    alice = await _alice_starts_everything(rt, adapter)
    bobs = await rt.service.accept(inbound("my own request", "b1", BOB))
    assert bobs is not None and rt.lanes.status(CONV.id).queued == 1

    reply = await _stop_reply(rt, adapter, "b2", BOB)

    # Bob's own queued request is cancelled; all of Alice's work goes on.
    assert bobs.cancelled()
    assert not alice.turn.done()
    assert not alice.run.done.is_set() and alice.run.state("a") == "running"
    assert [p.id for p in await rt.broker.pending(CONV)] == [alice.prompt.id]
    campaign = await rt.campaigns.store.get(alice.campaign.id)
    assert campaign is not None and campaign.state not in FINAL_STATES

    # The reply says what it cancelled and what it left, by display name, pinging nobody.
    cancelled, left = reply.split("\n")
    assert cancelled == "Stopped: cancelled 1 request(s) in this thread."
    assert left.startswith("Still running (not yours to stop): ")
    for what in (
        "1 request(s) in this thread",
        f"run `{alice.run.id}`",
        f"question `{alice.prompt.id[:8]}`",
        f"campaign `{alice.campaign.id}`",
        "by user-UALICE — user-UALICE, an approver or an admin can stop them",
    ):
        assert what in left, (what, left)
    assert "<@" not in reply and f"`{ALICE}`" not in reply

    # Alice's request finishes once the platform answers.
    adapter.release.set()
    assert (await alice.turn).status == "completed"


async def test_an_admins_stop_cancels_everyones_work(bot: tuple[Runtime, SlowPlatform]) -> None:
    rt, adapter = bot
    alice = await _alice_starts_everything(rt, adapter)
    bobs = await rt.service.accept(inbound("my own request", "b1", BOB))
    assert bobs is not None

    reply = await _stop_reply(rt, adapter, "s1", ADMIN)

    assert bobs.cancelled() and alice.turn.cancelled()
    await eventually(alice.run.done.is_set)
    assert await rt.broker.pending(CONV) == []
    campaign = await rt.campaigns.store.get(alice.campaign.id)
    assert campaign is not None and campaign.state == "cancelled"
    assert reply.startswith("Stopped: cancelled 2 request(s) in this thread")
    for what in (
        f"run `{alice.run.id}` by user-UALICE",
        f"question `{alice.prompt.id[:8]}` by user-UALICE",
        f"campaign `{alice.campaign.id}` by user-UALICE",
    ):
        assert what in reply, (what, reply)
    assert "Still running" not in reply


async def test_a_recorded_stop_keeps_only_the_stoppers_messages_from_resuming(
    bot: tuple[Runtime, SlowPlatform], isolated_env: Path
) -> None:
    # What a restart resumes is the unhandled inbound messages: Bob's stop must not mark
    # Alice's queued message stopped (it would never run), only his own.
    rt, adapter = bot
    adapter.hold = True
    alices_first = await rt.service.accept(inbound("first", "a1", ALICE))
    assert alices_first is not None
    await adapter.holding.wait()
    alices_queued = await rt.service.accept(inbound("second", "a2", ALICE))
    bobs_queued = await rt.service.accept(inbound("bob's", "b1", BOB))
    assert alices_queued is not None and bobs_queued is not None

    await _stop_reply(rt, adapter, "b2", BOB)

    rows = await asyncio.to_thread(
        db_rows,
        isolated_env,
        "SELECT author_id, text, handled, stopped FROM messages WHERE direction = 'in' ORDER BY id",
    )
    assert rows == [
        (ALICE, "first", 1, 0),
        (ALICE, "second", 0, 0),
        (BOB, "bob's", 1, 1),
        (BOB, "stop", 1, 0),
    ]
    resumable = [m for m, _ in await rt.conversation_log.unhandled_inbound("test")]
    assert len(resumable) == 1
    assert bobs_queued.cancelled() and not alices_queued.done()
    adapter.release.set()
    assert (await alices_queued).status == "completed"


async def test_a_stop_cut_short_by_a_crash_runs_again_by_the_same_rule(
    conversation_log: ConversationLog,
) -> None:
    # The stop is recorded before anything is cancelled, and counts as handled only once
    # every owner of work has cancelled its part: a crash in between (here: shutdown while
    # a campaign is being terminated) runs the same stop, for the same person, next start.
    seen: list[ConversationStopped] = []
    terminating = asyncio.Event()

    async def slow_owner(event: ConversationStopped) -> None:
        seen.append(event)
        terminating.set()
        await asyncio.Event().wait()  # until the process goes away

    async def owner(event: ConversationStopped) -> None:
        seen.append(event)

    def service(hook: object) -> tuple[ConversationService, LaneManager, RecordingChannel]:
        bus = EventBus()
        bus.subscribe(ConversationStopped, hook)  # type: ignore[arg-type]
        lanes = LaneManager(bus=bus)
        channel = RecordingChannel()
        built = ConversationService(
            ConversationParts(
                conversation_log,
                lanes,
                HostAgent(OfflineProvider(), ToolRegistry[TurnContext]()),
                Outbox(conversation_log, {channel.platform: channel}),
                bus,
            ),
            ConversationConfig(dedup_ttl_seconds=60),
        )
        return built, lanes, channel

    first, lanes, _ = service(slow_owner)
    assert await first.receive(inbound("stop", "s1", BOB))
    await terminating.wait()
    await first.close()
    await lanes.drain(0)

    restarted, lanes, channel = service(owner)
    await restarted.recover("test")
    await restarted.quiesce(CONV)
    assert [e.conversation_id for e in seen] == [CONV.id, CONV.id]
    assert [(e.by, e.privileged) for e in seen] == [(BOB, False), (BOB, False)]
    assert channel.texts == ["Stopped: nothing of yours was running in this thread."]
    assert await conversation_log.unhandled_inbound("test") == []
    await lanes.drain(1)
