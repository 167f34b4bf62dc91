"""Memory through full turns: a user's records reach only that user's turns (never another
person's in the same thread), DM notes stay out of channels, completed turns become
episodes recalled later, and the chat controls remember / recall / forget work."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest

from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from agents.tools import ToolRegistry
from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import (
    ConversationConfig,
    ConversationExtras,
    ConversationParts,
    ConversationService,
)
from host.features.memory.personal import MemoryCommands, MemoryContext, MemoryWriter, owner_of
from host.prompts.broker import PromptBroker
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus
from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from memory.archive import Archive
from memory.index import HybridIndex
from memory.service import MemoryService
from tests.fakes.providers import TestProvider
from tests.fakes.recording_channel import RecordingChannel


class SystemRecorder(TestProvider):
    """Answers `ok` and keeps every system prompt it was sent."""

    def __init__(self) -> None:
        self.systems: list[str] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.systems.append(system)
        return ModelReply(content=[TextBlock(text="ok")], stop_reason="end_turn")


@dataclass
class Rig:
    service: ConversationService
    channel: RecordingChannel
    provider: SystemRecorder
    memory: MemoryService
    writer: MemoryWriter
    broker: PromptBroker
    store: Store

    async def say(self, text: str, author: str, event: str, *, dm: bool = False) -> None:
        msg = InboundMessage(
            platform="test",
            workspace="W",
            channel="D1" if dm else "C1",
            thread="T",
            message_id=event,
            author_id=author,
            author_name=f"user-{author}",
            text=text,
            event_id=event,
            is_dm=dm,
        )
        turn = await self.service.accept(msg)
        if turn is not None:
            await turn
        await self.writer.idle()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    log = ConversationLog(store)
    channel = RecordingChannel()
    outbox = Outbox(log, MappingProxyType({channel.platform: channel}))
    bus = EventBus()
    broker = PromptBroker(store, surfaces=MappingProxyType({}), bus=bus)
    memory = MemoryService(Archive(store), HybridIndex(None, tmp_path / "index"))
    await memory.load_index()
    writer = MemoryWriter(memory, log)
    commands = MemoryCommands(memory, broker, outbox)
    writer.subscribe(bus)
    commands.subscribe(bus)
    bus.freeze()
    provider = SystemRecorder()
    host = HostAgent(
        provider, ToolRegistry[TurnContext](), context_sources=(MemoryContext(memory),)
    )
    service = ConversationService(
        ConversationParts(log, LaneManager(EventBus()), host, outbox, bus),
        ConversationConfig(dedup_ttl_seconds=60),
        ConversationExtras(commands=commands),
    )
    yield Rig(service, channel, provider, memory, writer, broker, store)
    await service.close()
    await writer.close()
    await memory.save_index()
    await store.close()


async def test_a_users_memory_never_reaches_another_users_turn_in_the_same_thread(
    rig: Rig,
) -> None:
    await rig.say("remember I am allergic to peanuts", "U1", "e1")
    assert rig.channel.texts[-1] == "Noted: I am allergic to peanuts"
    await rig.say("suggest a snack without peanuts", "U2", "e2")
    await rig.say("suggest a snack without peanuts", "U1", "e3")
    stranger, owner = rig.provider.systems
    assert "allergic" not in stranger
    assert "allergic to peanuts" in owner and "untrusted-data" in owner


async def test_a_note_made_in_a_dm_stays_out_of_channel_turns(rig: Rig) -> None:
    await rig.say("remember my salary is 100k", "U1", "e1", dm=True)
    assert "only in our DMs" in rig.channel.texts[-1]
    await rig.say("what is my salary", "U1", "e2")
    await rig.say("what is my salary", "U1", "e3", dm=True)
    channel_turn, dm_turn = rig.provider.systems
    assert "100k" not in channel_turn
    assert "100k" in dm_turn
    await rig.say("what do you remember about me", "U1", "e4")
    assert "100k" not in rig.channel.texts[-1]


async def test_what_a_dm_conversation_taught_stays_out_of_channel_turns(rig: Rig) -> None:
    # Regression: completed turns reached the memory writer without `is_dm` (or the author's
    # name), so a DM conversation's episode landed in the channel partition.
    await rig.say("I earn 100k and plan to switch teams in March.", "U1", "e1", dm=True)
    await rig.say("how much do I earn and when do I switch teams", "U1", "e2")
    await rig.say("how much do I earn and when do I switch teams", "U1", "e3", dm=True)
    _, channel_turn, dm_turn = rig.provider.systems
    assert "100k" not in channel_turn
    assert "100k" in dm_turn and "What you remember about user-U1" in dm_turn


async def test_a_completed_turn_becomes_an_episode_recalled_later(rig: Rig) -> None:
    await rig.say("I maintain the billing service written in Rust.", "U1", "e1")
    episodes = await rig.memory.archive.episodes(owner_of(_conv(), "U1"))
    assert [f.text for e in episodes for f in e.facts] == [
        "I maintain the billing service written in Rust."
    ]
    await rig.say("how should I profile billing service latency", "U1", "e2")
    assert "billing service written in Rust" in rig.provider.systems[-1]
    answer = rig.channel.texts
    await rig.say("what do you remember about me", "U1", "e3")
    assert "billing service written in Rust" in rig.channel.texts[-1]
    # One row per thing remembered, under a header: chat draws it as a table.
    shown = rig.channel.texts[-1].split("\n")
    assert shown[2:4] == ["| Kind | Remembered |", "|---|---|"]
    assert any(r.startswith("| fact | ") and "Rust" in r for r in shown[4:]), shown
    assert len(rig.channel.texts) == len(answer) + 1


async def test_commands_never_become_episodes_or_facts_but_sentences_do(rig: Rig) -> None:
    owner = owner_of(_conv(), "U1")
    # Each is an instruction to the bot, read by the bot's own parsers, not about U1.
    await rig.say('s1: shell: echo "hello from my sandbox" && uname -a\nconfirm', "U1", "e1")
    await rig.say(
        "campaign: lower my loss | machine: local | run: python train.py "
        "| metric: loss min | budget: 2h",
        "U1",
        "e2",
    )
    await rig.say("campaign: resume cmp_0123456789", "U1", "e3")
    assert await rig.memory.archive.episodes(owner) == []
    # A sentence about the person still becomes a fact; the command lines beside it do not.
    await rig.say(
        "I run my nightly checks on the billing service.\n"
        "watch: every 30m | check: curl -fsS http://localhost:8080/health\n"
        "schedule: every 2h | s1: shell: df -h /\n"
        "s2: shell: echo my disk [after s1]",
        "U1",
        "e4",
    )
    episodes = await rig.memory.archive.episodes(owner)
    assert [f.text for e in episodes for f in e.facts] == [
        "I run my nightly checks on the billing service."
    ]
    assert [e.narrative for e in episodes] == [
        "user-U1 said: I run my nightly checks on the billing service."
    ]
    described = await rig.memory.describe(owner, dm=False)
    assert described.endswith("\n| fact | I run my nightly checks on the billing service. |")


async def test_forget_removes_records_and_their_index_entries(rig: Rig) -> None:
    owner = owner_of(_conv(), "U1")
    await rig.say("remember I use vim", "U1", "e1")
    await rig.say("remember I like tea", "U1", "e2")
    await rig.say("forget vim", "U1", "e3")
    assert rig.channel.texts[-1].startswith("Forgot 1 record(s)")
    hits = await rig.memory.index.search(owner, "vim editor", 5)
    assert all("vim" not in h.doc.text for h in hits)
    notes = await rig.memory.archive.notes(owner)
    assert [n.text for n in notes] == ["I like tea"]


async def test_forget_everything_waits_for_the_owners_approval(rig: Rig) -> None:
    owner = owner_of(_conv(), "U1")
    await rig.say("remember I like tea", "U1", "e1")
    await rig.say("forget everything", "U1", "e2")
    assert len(await rig.memory.archive.notes(owner)) == 1  # nothing deleted yet
    (prompt,) = await rig.broker.pending(_conv())
    # Named by its short id, as every prompt is (not its 32 characters).
    assert rig.channel.texts[-1] == (
        f"Approve prompt `{prompt.id[:8]}` to confirm; nothing is deleted until then."
    )
    stranger = await rig.broker.answer(prompt.id, prompt.nonce, "U2", "approve")
    assert stranger.status == "not_allowed"
    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "U1", "approve")
    assert outcome.status == "accepted"
    assert await rig.memory.archive.notes(owner) == []
    assert await rig.memory.index.search(owner, "tea", 5) == []
    assert any(t.startswith("Done: I forgot everything") for t in rig.channel.texts)


def _conv() -> ConversationRef:
    return ConversationRef("test", "W", "C1", "T")


async def test_turns_a_crash_kept_from_memory_are_taken_in_once(rig: Rig) -> None:
    owner = owner_of(_conv(), "U1")
    await rig.say("I maintain the billing service written in Rust.", "U1", "e1")
    await rig.say("I deploy it on Fridays.", "U1", "e2")
    assert await rig.writer.recover() == 0  # nothing owed
    # As if the process died after the reply: the first turn's episode was never written.
    await rig.store.execute("DELETE FROM memory_episodes WHERE owner = ?", (owner,))
    await rig.store.execute("UPDATE turns SET remembered = 0")
    assert await rig.writer.recover() == 2
    await rig.writer.idle()
    facts = [f.text for e in await rig.memory.archive.episodes(owner) for f in e.facts]
    assert sorted(facts) == [
        "I deploy it on Fridays.",
        "I maintain the billing service written in Rust.",
    ]
    # Died after the write but before the mark: offered again, recorded once only.
    await rig.store.execute("UPDATE turns SET remembered = 0")
    assert await rig.writer.recover() == 2
    await rig.writer.idle()
    again = [f.text for e in await rig.memory.archive.episodes(owner) for f in e.facts]
    assert sorted(again) == sorted(facts)
    assert await rig.writer.recover() == 0


async def test_a_burst_of_turns_costs_one_index_save_and_shutdown_writes_it(
    tmp_path: Path,
) -> None:
    # Each turn rewrote and fsynced the manifest of every owner's partition.
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        index = HybridIndex(None, tmp_path / "index")
        saves: list[int] = []
        save = index.save

        async def counted() -> None:
            saves.append(index.count())
            await save()

        index.save = counted  # type: ignore[method-assign]
        memory = MemoryService(Archive(store), index, save_delay=3600)
        for n in range(5):
            await memory.record_turn(
                "user:t:W:U1",
                "alice",
                f"I use rust {n}",
                conversation_id="c",
                turn_id=f"t{n}",
                dm=False,
            )
        await memory.remember("user:t:W:U1", "alice", "I like tea", dm=False)
        assert saves == []  # nothing written yet: the save waits for the burst to end
        await memory.save_index()
        assert saves == [index.count()]  # one save, holding every record
        assert (tmp_path / "index" / "manifest.json").exists()
    finally:
        await store.close()
