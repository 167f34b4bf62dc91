"""HybridIndex and tokenization with a deterministic hash embedder (no model needed)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest

from memory.embeddings import Vectors, normalize_rows
from memory.index import Doc, Hit, HybridIndex, IndexSettings, owner_key
from memory.tokenize import split_camel, stem, tokenize


class HashEmbedder:
    """Test double: feature-hashed token counts, L2-normalized (same text → same vector)."""

    def __init__(self, dimension: int = 64, name: str | None = None) -> None:
        self._dimension = dimension
        self._name = name or f"hash/{dimension}"
        self.embedded = 0  # texts encoded so far

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.embedded += len(texts)
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text) or ["<empty>"]:
                digest = hashlib.sha1(token.encode()).digest()
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, int.from_bytes(digest[:4], "little") % self._dimension] += sign
        return normalize_rows(out)


async def source(docs: Iterable[Doc]) -> AsyncIterator[Doc]:
    """The lead's SQLite documents source, as an async iterator."""
    for doc in docs:
        yield doc


def ids(hits: list[Hit]) -> set[str]:
    """Every document id in the hits, nested facts included."""
    return {h.doc.id for h in hits} | {c.doc.id for h in hits for c in h.children}


def corpus(owner: str = "alice") -> list[Doc]:
    return [
        Doc("ep1", owner, "episode", "Planning the release of the billing service next week"),
        Doc("ep1.f1", owner, "fact", "The billing service release is on Thursday", "ep1"),
        Doc("ep1.f2", owner, "fact", "Rollback owner is the payments team", "ep1"),
        Doc("ep2", owner, "episode", "Chat about favourite drinks and lunch places"),
        Doc("ep2.f1", owner, "fact", "Prefers green tea over coffee", "ep2"),
        Doc("n1", owner, "note", "Uses the retry_backoff_ms setting in memory.index"),
    ]


# -- tokenization ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("snake_case_name", {"snake", "case", "name", "snake_case_name"}),
        ("getHTTPResponse", {"get", "http", "response", "gethttpresponse"}),
        ("raven_bot.memory.index", {"memory.index", "raven_bot.memory.index", "index"}),
        ("kebab-case-flag", {"kebab", "case", "flag", "kebab-case-flag"}),
        ("v1.2.3 on port 8080", {"v1.2.3", "1", "2", "3", "8080", "port"}),
    ],
)
def test_tokenize_code_identifiers(text: str, expected: set[str]) -> None:
    assert expected <= set(tokenize(text))


def test_tokenize_accents_nfkc_and_case() -> None:
    assert tokenize("Café NAÏVE Ｆｕｌｌwidth") == ["cafe", "naive", "fullwidth"]
    assert tokenize("cafe") == tokenize("café")
    # Non-Latin scripts keep their marks and letters.
    assert tokenize("Привет мир") == ["привет", "мир"]
    assert tokenize("नमस्ते") == ["नमस्ते"]


def test_tokenize_cjk_bigrams_and_mixed_scripts() -> None:
    assert tokenize("我喜欢绿茶") == ["我喜", "喜欢", "欢绿", "绿茶"]
    assert tokenize("用Python写代码") == ["用", "python", "写代", "代码"]
    assert tokenize("東") == ["東"]


def test_tokenize_stopwords_and_suffixes() -> None:
    assert tokenize("The services were deploying") == ["service", "deploy"]
    assert (
        stem("status") == "status" and stem("queries") == "query" and stem("deployed") == "deploy"
    )
    assert split_camel("parseJSON2Yaml") == ["parse", "JSON", "2", "Yaml"]
    assert tokenize("") == [] and tokenize("!!! ...") == []


# -- ranking, nesting, kinds -------------------------------------------------------------


async def test_fact_outranks_episode_and_is_nested() -> None:
    index = HybridIndex(HashEmbedder())
    await index.add(corpus())
    hits = await index.search("alice", "billing service release is on Thursday", 3)
    top = hits[0]
    assert top.doc.id == "ep1"  # the episode comes back once, as the container
    assert [c.doc.id for c in top.children] == ["ep1.f1"]
    assert top.score == top.children[0].score  # recovered with its best fact's score
    assert 0.0 < top.score <= 1.0
    assert top.ranks[0] == 1 and top.ranks[1] is not None
    assert top.rrf == pytest.approx(1 / 61 + 1 / (60 + top.ranks[1]))
    assert sum(1 for h in hits if h.doc.id == "ep1") == 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_keyword_only_mode_nests_facts_by_their_own_terms() -> None:
    index = HybridIndex(None)
    assert index.mode == "keyword"
    await index.add(corpus())
    hits = await index.search("alice", "green tea", 3)
    assert hits[0].doc.id == "ep2" and [c.doc.id for c in hits[0].children] == ["ep2.f1"]
    assert hits[0].ranks == (1, None)
    hits = await index.search("alice", "retry_backoff_ms", 3)
    assert [h.doc.id for h in hits] == ["n1"]


async def test_kinds_filter() -> None:
    index = HybridIndex(HashEmbedder())
    await index.add(corpus())
    notes = await index.search("alice", "memory.index billing tea", 5, kinds=["note"])
    assert ids(notes) == {"n1"}
    episodes = await index.search("alice", "billing Thursday", 5, kinds=["episode"])
    assert all(h.doc.kind == "episode" and not h.children for h in episodes)


# -- partitions and removal --------------------------------------------------------------


async def test_partition_isolation_including_removals_and_reload(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    index = HybridIndex(embedder, tmp_path)
    await index.add(corpus("alice"))
    await index.add([Doc("b1", "bob", "note", "Bob prefers green tea too")])
    for query in ("green tea", "billing service release", "retry_backoff_ms"):
        assert ids(await index.search("bob", query, 10)) <= {"b1"}
    assert await index.search("carol", "green tea", 10) == []
    await index.remove(["b1"])
    assert await index.search("bob", "green tea", 10) == []
    await index.save()
    docs = [*corpus("alice"), Doc("b2", "bob", "note", "Bob deploys on Fridays")]
    reloaded = await HybridIndex.load(tmp_path, embedder, source(docs))
    assert ids(await reloaded.search("bob", "green tea billing Fridays", 10)) == {"b2"}
    assert "b2" not in ids(await reloaded.search("alice", "Fridays deploys", 10))


async def test_remove_and_remove_owner_delete_vectors_and_files(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    index = HybridIndex(embedder, tmp_path)
    await index.add([*corpus("alice"), *corpus("bob")])
    await index.save()
    assert await index.remove(["ep2.f1"], owner="alice") == 1
    assert index.vector_count("alice") == 5
    assert "ep2.f1" not in ids(await index.search("alice", "Prefers green tea over coffee", 10))
    await index.remove_owner("bob")
    assert await index.search("bob", "billing", 10) == []
    assert not (tmp_path / f"{owner_key('bob')}.faiss").exists()
    # The files already hold the removal: a reload from a source that still (wrongly) lists
    # alice's removed fact re-encodes rather than trusting them, and bob has no files left.
    alice_docs = [d for d in corpus("alice") if d.id != "ep2.f1"]
    before = embedder.embedded
    reloaded = await HybridIndex.load(tmp_path, embedder, source(alice_docs))
    assert embedder.embedded == before  # vectors reused: the saved partition matches
    assert reloaded.vector_count("alice") == 5 and reloaded.owners() == ["alice"]
    assert "ep2.f1" not in ids(await reloaded.search("alice", "Prefers green tea", 10))


async def test_reinserting_a_document_replaces_it() -> None:
    index = HybridIndex(HashEmbedder())
    await index.add(corpus())
    await index.add([Doc("ep2.f1", "alice", "fact", "Now drinks only espresso", "ep2")])
    assert index.vector_count("alice") == 6 and index.count("alice") == 6
    hits = await index.search("alice", "espresso", 5)
    assert "ep2.f1" in ids(hits)
    assert "ep2.f1" not in ids(await index.search("alice", "green tea", 5))


# -- persistence and rebuilds --------------------------------------------------------------


async def test_reload_reuses_vectors_without_encoding(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    index = HybridIndex(embedder, tmp_path)
    await index.add(corpus())
    await index.save()
    encoded = embedder.embedded
    reloaded = await HybridIndex.load(tmp_path, embedder, source(corpus()))
    assert embedder.embedded == encoded and reloaded.last_load_reason is None
    assert ids(await reloaded.search("alice", "green tea", 1)) == {"ep2", "ep2.f1"}


@pytest.mark.parametrize("damage", ["delete", "corrupt", "truncate_manifest"])
async def test_rebuild_when_files_missing_or_corrupt(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path = tmp_path / "index"
    embedder = HashEmbedder()
    index = HybridIndex(embedder, tmp_path)
    await index.add(corpus())
    await index.save()
    expected = ids(await index.search("alice", "green tea", 2))
    faiss_file = tmp_path / f"{owner_key('alice')}.faiss"
    if damage == "delete":
        for path in tmp_path.iterdir():
            path.unlink()
    elif damage == "corrupt":
        faiss_file.write_bytes(b"not a faiss index")
    else:
        (tmp_path / "manifest.json").write_text('{"version": 1, "emb')
    caplog.set_level(logging.WARNING, logger="memory.index")
    reloaded = await HybridIndex.load(tmp_path, embedder, source(corpus()))
    assert reloaded.last_load_reason is not None
    assert len([r for r in caplog.records if "rebuilding" in r.getMessage()]) == 1
    assert ids(await reloaded.search("alice", "green tea", 2)) == expected
    assert faiss_file.exists()  # rewritten
    again = await HybridIndex.load(tmp_path, embedder, source(corpus()))
    assert again.last_load_reason is None


@pytest.mark.parametrize("other", [HashEmbedder(32), HashEmbedder(64, name="other/64")])
async def test_embedder_switch_triggers_rebuild(tmp_path: Path, other: HashEmbedder) -> None:
    index = HybridIndex(HashEmbedder(64), tmp_path)
    await index.add(corpus())
    await index.save()
    reloaded = await HybridIndex.load(tmp_path, other, source(corpus()))
    assert reloaded.last_load_reason is not None and "embedder" in reloaded.last_load_reason
    assert other.embedded == len(corpus())
    hits = await reloaded.search("alice", "Prefers green tea over coffee", 1)
    assert ids(hits) == {"ep2", "ep2.f1"}
    manifest = (tmp_path / "manifest.json").read_text()
    assert other.name in manifest


async def test_switch_to_keyword_only_and_back(tmp_path: Path) -> None:
    index = HybridIndex(HashEmbedder(), tmp_path)
    await index.add(corpus())
    await index.save()
    keyword = await HybridIndex.load(tmp_path, None, source(corpus()))
    assert keyword.mode == "keyword" and keyword.last_load_reason is not None
    assert "ep2.f1" in ids(await keyword.search("alice", "green tea", 3))
    back = await HybridIndex.load(tmp_path, HashEmbedder(), source(corpus()))
    assert back.last_load_reason is not None and back.vector_count("alice") == 6


async def test_source_changes_since_save_are_reencoded(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    index = HybridIndex(embedder, tmp_path)
    await index.add(corpus())
    await index.save()
    changed = [*corpus(), Doc("n2", "alice", "note", "Added after the last save")]
    reloaded = await HybridIndex.load(tmp_path, embedder, source(changed))
    assert reloaded.last_load_reason is not None
    assert "n2" in ids(await reloaded.search("alice", "added after the last save", 1))


# -- HNSW and concurrency --------------------------------------------------------------------


def numbered(owner: str, n: int) -> list[Doc]:
    topics = ["kafka", "postgres", "redis", "nginx", "grafana", "terraform", "ansible"]
    return [
        Doc(f"{owner}-{i}", owner, "note", f"note {i} about {topics[i % 7]} item{i} code{i * 7}")
        for i in range(n)
    ]


async def test_hnsw_above_threshold_with_removals(tmp_path: Path) -> None:
    settings = IndexSettings(hnsw_threshold=20)
    embedder = HashEmbedder(128)
    index = HybridIndex(embedder, tmp_path, settings)
    await index.add(numbered("alice", 15))
    assert not index._parts["alice"].is_hnsw
    await index.add(numbered("alice", 60)[15:])
    assert index._parts["alice"].is_hnsw
    hits = await index.search("alice", "item42 code294", 3, channels=["dense"])
    assert hits[0].doc.id == "alice-42"
    await index.remove(["alice-42"])
    hits = await index.search("alice", "item42 code294", 10, channels=["dense"])
    assert "alice-42" not in ids(hits)
    await index.save()
    remaining = [d for d in numbered("alice", 60) if d.id != "alice-42"]
    encoded = embedder.embedded
    reloaded = await HybridIndex.load(tmp_path, embedder, source(remaining), settings)
    assert embedder.embedded == encoded  # the saved HNSW index was reused
    assert reloaded._parts["alice"].is_hnsw and reloaded.vector_count("alice") == 59
    hits = await reloaded.search("alice", "item41 code287", 3)
    assert hits[0].doc.id == "alice-41"
    assert "alice-42" not in ids(await reloaded.search("alice", "item42 code294", 10))


async def test_searches_during_adds_and_removes() -> None:
    index = HybridIndex(HashEmbedder())
    await index.add(numbered("alice", 10))
    docs = numbered("alice", 200)

    async def writer() -> None:
        for start in range(10, 200, 10):
            await index.add(docs[start : start + 10])
            await index.remove([f"alice-{start - 5}"])

    async def reader() -> list[int]:
        seen = []
        for i in range(40):
            hits = await index.search("alice", f"item{i} kafka", 5)
            assert all(h.doc.owner == "alice" for h in hits)
            seen.append(len(hits))
        return seen

    results = await asyncio.gather(writer(), reader(), reader(), index.search("bob", "x", 3))
    assert all(n > 0 for n in results[1])
    assert results[3] == []
    assert index.count("alice") == 200 - 19
    assert "alice-5" not in ids(await index.search("alice", "item5 kafka", 10))


async def test_overlapping_saves_never_collide_on_a_temporary_file(tmp_path: Path) -> None:
    # Regression: the writer's save after each write and the shutdown save used one
    # `manifest.json.tmp`; the second rename found it gone (FileNotFoundError in CI).
    index = HybridIndex(HashEmbedder(), tmp_path)
    await index.add(corpus("alice"))
    for round_ in range(5):
        await index.add([Doc(f"n{round_}.{i}", f"u{i}", "note", f"note {i}") for i in range(8)])
        await asyncio.gather(*(index.save() for _ in range(16)))
    assert not await asyncio.to_thread(lambda: list(tmp_path.glob("*.tmp")))
    reloaded = await HybridIndex.load(tmp_path, HashEmbedder(), source(corpus("alice")))
    assert reloaded.last_load_reason is None or "alice" not in reloaded.last_load_reason


async def test_a_repeated_query_is_encoded_once_and_old_ones_are_forgotten() -> None:
    """A turn recalls the same text from several memories: its vector is reused; the
    cache keeps only the most recent QUERY_VECTORS_KEPT queries."""
    from memory.index import QUERY_VECTORS_KEPT

    embedder = HashEmbedder()
    index = HybridIndex(embedder)
    await index.add(corpus("alice") + corpus("bob"))
    before = embedder.embedded
    first = await index.search("alice", "billing release", 3)
    again = await index.search("alice", "billing release", 3)
    other_owner = await index.search("bob", "billing release", 3)
    assert embedder.embedded == before + 1
    assert [h.doc.id for h in first] == [h.doc.id for h in again]
    assert {h.doc.owner for h in other_owner} == {"bob"}
    for n in range(QUERY_VECTORS_KEPT):
        await index.search("alice", f"query number {n}", 1)
    assert embedder.embedded == before + 1 + QUERY_VECTORS_KEPT
    await index.search("alice", "billing release", 3)  # evicted: encoded again
    assert embedder.embedded == before + 2 + QUERY_VECTORS_KEPT
