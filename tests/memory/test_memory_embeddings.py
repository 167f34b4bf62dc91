"""The real MiniLM embedder (loaded once per session) and hybrid ranking with it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from memory.embeddings import (
    EmbedderUnavailable,
    MiniLMEmbedder,
    select_embedder,
    semantic_unavailable_reason,
)
from memory.index import Doc, Hit, HybridIndex
from memory.minilm import MiniLMEncoder
from tests.helpers import TEST_DATA


@pytest.fixture(scope="session")
def minilm_model() -> Iterator[MiniLMEncoder]:
    """The int8 ONNX MiniLM encoder, loaded once for the session."""
    embedder = MiniLMEmbedder()
    asyncio.run(embedder.load())
    assert embedder.model is not None
    yield embedder.model


@pytest.fixture
def minilm(minilm_model: MiniLMEncoder) -> MiniLMEmbedder:
    """A fresh embedder (its locks belong to this test's loop) sharing the session model."""
    return MiniLMEmbedder(model=minilm_model)


def test_the_int8_encoder_gives_the_vectors_sentence_transformers_gave(
    minilm_model: MiniLMEncoder,
) -> None:
    """Vectors recorded from sentence-transformers (torch, float32) for the same model: empty
    text, non-ASCII text and a text cut at 256 tokens included. The int8 weights move them by
    little (measured cosine 0.9986-0.9997; plain int8 without the smoothing gave 0.984)."""
    recorded = np.load(TEST_DATA / "minilm_reference.npz")
    texts = [str(t) for t in recorded["texts"]]
    mine = minilm_model.encode(texts)
    assert mine.shape == recorded["vectors"].shape
    assert (mine * recorded["vectors"]).sum(axis=1).min() > 0.995
    assert np.abs(np.linalg.norm(mine, axis=1) - 1).max() < 1e-5


def test_a_text_gets_the_same_vector_whatever_it_is_encoded_with(
    minilm_model: MiniLMEncoder,
) -> None:
    """Activations are quantized per call: batched texts would shift each other's vectors.
    Each is encoded alone, so the vector of a text never depends on its neighbours."""
    texts = ["Ana likes ramen", "x " * 300, "naïve café — 東京 🚀", ""]
    together = minilm_model.encode(texts)
    for row, text in enumerate(texts):
        assert np.array_equal(minilm_model.encode([text])[0], together[row])


def test_select_embedder_modes() -> None:
    assert select_embedder("keyword") is None
    auto = select_embedder("auto")
    assert isinstance(auto, MiniLMEmbedder) and not auto.loaded  # lazy: nothing loaded yet
    assert isinstance(select_embedder("semantic"), MiniLMEmbedder)
    assert semantic_unavailable_reason() is None


def test_semantic_mode_without_the_extra_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory import embeddings

    monkeypatch.setattr(embeddings, "semantic_unavailable_reason", lambda: "not installed")
    assert select_embedder("auto") is None
    with pytest.raises(EmbedderUnavailable, match="not installed"):
        select_embedder("semantic")


async def test_embed_shape_normalization_and_off_loop(minilm: MiniLMEmbedder) -> None:
    assert minilm.name.startswith("minilm-l6-v2-int8-") and minilm.name.endswith("/384")
    assert minilm.dimension == 384
    texts = [f"sentence number {i} about deployment" for i in range(200)]
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    beat = asyncio.create_task(heartbeat())
    started = time.perf_counter()
    vectors = await minilm.embed(texts)
    elapsed = time.perf_counter() - started
    beat.cancel()
    assert vectors.shape == (200, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # The loop kept running while the worker thread encoded.
    assert ticks > 10, (ticks, elapsed)
    assert (await minilm.embed([])).shape == (0, 384)


def flat_ids(hits: list[Hit]) -> list[str]:
    return [d for h in hits for d in [h.doc.id, *(c.doc.id for c in h.children)]]


CRAFTED = [
    Doc("e-trip", "u", "episode", "We talked about the user's upcoming holiday plans."),
    Doc("f-trip", "u", "fact", "The user is flying to Lisbon in March.", "e-trip"),
    Doc("f-trip2", "u", "fact", "The user wants a hotel near the beach.", "e-trip"),
    Doc("e-cfg", "u", "episode", "Debugging session on the retry configuration."),
    Doc("f-cfg", "u", "fact", "Set RAVEN_RETRY_JITTER_MS to 250 in staging.", "e-cfg"),
    Doc("e-food", "u", "episode", "Conversation about dinner and cooking."),
    Doc("f-food", "u", "fact", "The user is vegetarian and avoids fish.", "e-food"),
    Doc("e-pet", "u", "episode", "The user mentioned their family and pets."),
    Doc("f-pet", "u", "fact", "The user has a dog called Biscuit.", "e-pet"),
    Doc("e-work", "u", "episode", "Planning the quarterly database migration at work."),
    Doc("f-work", "u", "fact", "The Postgres upgrade is scheduled for the weekend.", "e-work"),
    # Opaque identifiers: MiniLM sees lookalikes as near-duplicates, BM25 matches exactly.
    Doc("e-tix", "u", "episode", "Triage of open incident tickets."),
    Doc("f-tix", "u", "fact", "Ticket INC-48213 tracks the flaky login test.", "e-tix"),
    Doc("e-ord", "u", "episode", "Support chat about an order."),
    Doc("f-ord", "u", "fact", "Order INC-48231 was refunded last week.", "e-ord"),
    Doc("e-bld", "u", "episode", "CI build failures on arm64."),
    Doc("f-bld", "u", "fact", "Build INC-84213 failed on the arm64 runner.", "e-bld"),
]


async def test_hybrid_gets_what_each_channel_misses(minilm: MiniLMEmbedder) -> None:
    index = HybridIndex(minilm)
    await index.add(CRAFTED)
    paraphrase = "Which city is the person travelling to by plane this spring?"
    identifier = "INC-48213"
    k = 2
    lex_para = await index.search("u", paraphrase, k, channels=["lex"])
    dense_para = await index.search("u", paraphrase, k, channels=["dense"])
    assert "f-trip" not in flat_ids(lex_para)  # no shared content word
    assert "f-trip" in flat_ids(dense_para)
    dense_ident = await index.search("u", identifier, 1, channels=["dense"])
    lex_ident = await index.search("u", identifier, 1, channels=["lex"])
    assert "f-tix" in flat_ids(lex_ident)
    assert "f-tix" not in flat_ids(dense_ident)
    hybrid_para = await index.search("u", paraphrase, k)
    hybrid_ident = await index.search("u", identifier, 1)
    assert hybrid_para[0].doc.id == "e-trip" and "f-trip" in flat_ids(hybrid_para[:1])
    assert hybrid_ident[0].doc.id == "e-tix" and flat_ids(hybrid_ident) == ["e-tix", "f-tix"]


async def test_fact_outranks_its_episode_with_minilm(minilm: MiniLMEmbedder) -> None:
    index = HybridIndex(minilm)
    await index.add(CRAFTED)
    hits = await index.search("u", "Does the user eat meat?", 3)
    top = hits[0]
    assert top.doc.id == "e-food" and [c.doc.id for c in top.children] == ["f-food"]
    own = await index.search("u", "Does the user eat meat?", 3, kinds=["episode"])
    episode_alone = next(h for h in own if h.doc.id == "e-food")
    assert top.children[0].score > episode_alone.score  # the fact beat its episode
    assert top.score == top.children[0].score
    assert 0.0 < top.score < 1.0
    assert [h.doc.id for h in hits].count("e-food") == 1
