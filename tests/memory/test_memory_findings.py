"""Memory tells the truth about the person (issue 18, finding 7): episodes hold only the
author's words, `memory add|search` take an unquoted sentence, and a strong semantic match
ranks first in hybrid recall with the default MiniLM embedder."""

from __future__ import annotations

import asyncio
import getpass
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.models.anthropic_provider import AnthropicProvider
from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.features.memory.episode_former import ModelFormer
from host.features.memory.personal import MemoryWriter, owner_of
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, TurnCompleted
from memory.archive import Archive
from memory.embeddings import MiniLMEmbedder
from memory.index import Hit, HybridIndex
from memory.service import MemoryService
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.anthropic_server import SKILL_GATE, FakeAnthropic

KEY = "sk-ant-test-0123456789"
OWNER = "user:cli:local:U1"


# -- episodes: the author's words only --------------------------------------------------


@pytest.mark.slow
async def test_an_offline_turn_leaves_no_bot_notice_in_the_episode(isolated_env: Path) -> None:
    env = _env(isolated_env)
    code, out, err = await _run("chat", stdin=b"I use PyTorch for my models\n", env=env)
    assert code == 0, err
    assert "ANTHROPIC_API_KEY" in out  # the bot did answer with its offline notice
    code, shown, err = await _run("memory", "show", "--user", getpass.getuser(), env=env)
    assert code == 0, shown + err
    episodes = [line for line in shown.splitlines() if line.startswith("- episode")]
    assert episodes and "I use PyTorch for my models" in episodes[0]
    for line in episodes:
        assert "ANTHROPIC_API_KEY" not in line and "offline" not in line.lower()
        assert "the bot answered" not in line


async def test_the_model_former_never_sees_the_bots_reply(tmp_path: Path) -> None:
    """A completed turn carries the bot's reply; what memory forms from it never sees it."""
    reply = "I'm in offline mode: set ANTHROPIC_API_KEY for free-form answers."
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        async with FakeAnthropic(api_key=KEY, side_calls=(SKILL_GATE,)) as fake:
            fake.queue_tool_use(
                "record_episode",
                {"same_topic": False, "narrative": "Ana uses PyTorch.", "facts": []},
            )
            provider = AnthropicProvider(
                api_key=KEY, model="claude-test", base_url=fake.base_url, max_retries=0
            )
            memory = MemoryService(
                Archive(store),
                HybridIndex(None, tmp_path / "index"),
                former=ModelFormer(provider, timeout=10),
            )
            await memory.load_index()
            bus = EventBus()
            writer = MemoryWriter(memory, ConversationLog(store))
            writer.subscribe(bus)
            conv = ConversationRef("test", "W1", "C1", "T1")
            completed = TurnCompleted(
                conv, "t1", "alice", "user", "I use PyTorch", reply, author_name="Ana"
            )
            await bus.publish(completed)
            await writer.idle()
            await provider.aclose()
            sent = json.dumps(fake.requests[0]["json"])
        assert "I use PyTorch" in sent
        assert "offline mode" not in sent and "ANTHROPIC_API_KEY" not in sent
        (episode,) = await memory.archive.episodes(owner_of(conv, "alice"))
        assert episode.narrative == "Ana uses PyTorch."
    finally:
        await store.close()


# -- the command line: an unquoted sentence ---------------------------------------------


@pytest.mark.slow
async def test_memory_add_and_search_take_the_rest_of_the_line(isolated_env: Path) -> None:
    env = _env(isolated_env)
    code, out, err = await _run(
        "memory", "add", "--user", "U1", "deep", "learning", "notes", env=env
    )
    assert code == 0, out + err
    assert "stored note" in out and "usage:" not in out + err
    code, out, err = await _run(
        "memory", "search", "--user", "U1", "deep", "learning", "--json", env=env
    )
    assert code == 0, out + err
    assert [hit["text"] for hit in json.loads(out)] == ["deep learning notes"]
    code, _, err = await _run("memory", "search", "--user", "U1", env=env)
    assert code == 2
    assert "usage: raven-bot memory search" in err  # the subcommand's usage, not the top level


# -- hybrid recall: a strong semantic match first -----------------------------------------

# The finding's notes, with words that overlap the query only by accident ("deep", "learning").
NOTES = (
    "I use PyTorch for my models",
    "my cat is called Tom",
    "I prefer tabs",
    "I live in Berlin",
    "my favourite food is sushi",
    "I am learning Spanish",
    "I deploy with helm charts",
    "I have a deep dislike of meetings",
    "deep work happens in the mornings for me",
    "I'm learning to cook Thai food",
)


@pytest.fixture(scope="module")
def minilm_model() -> Iterator[Any]:
    """The default embedder's model, loaded once for this module."""
    embedder = MiniLMEmbedder()
    asyncio.run(embedder.load())
    yield embedder.model


@pytest.fixture(params=["notes", "turns"])
async def memory(
    request: pytest.FixtureRequest, minilm_model: Any, tmp_path: Path
) -> AsyncIterator[MemoryService]:
    """The person's memory as `memory add` (notes) or chat turns (episodes, facts, notes)
    leave it, recalled with the default embedder."""
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    service = MemoryService(
        Archive(store), HybridIndex(MiniLMEmbedder(model=minilm_model), tmp_path / "index")
    )
    await service.load_index()
    for i, text in enumerate(NOTES):
        if request.param == "notes":
            await service.remember(OWNER, "U1", text, dm=False)
        else:
            await service.record_turn(
                OWNER, "U1", text, conversation_id=f"c{i}", turn_id=f"t{i}", dm=False
            )
    yield service
    await store.close()


def _texts(hit: Hit) -> list[str]:
    return [hit.doc.text, *(child.doc.text for child in hit.children)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("deep learning framework", "I use PyTorch for my models"),
        # Lexical evidence still counts: the exact words, and a word with its meaning.
        ("helm charts", "I deploy with helm charts"),
        ("what pet do I have", "my cat is called Tom"),
    ],
)
async def test_a_strong_match_ranks_first(memory: MemoryService, query: str, expected: str) -> None:
    recalled = await memory.recall(OWNER, query, dm=False, k=5)
    top = recalled.hits[0]
    assert any(expected in text for text in _texts(top)), [
        (round(h.score, 4), h.ranks, h.doc.text) for h in recalled.hits
    ]
