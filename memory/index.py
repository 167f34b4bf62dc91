"""The derived recall index: per-owner BM25 + FAISS partitions and §5.3 hybrid recall.

SQLite is the source of truth; this index is rebuilt from it. The lead feeds documents with
`add`/`remove`/`remove_owner` and asks `search(owner, query, k)`. A partition holds one
owner's documents: a BM25Okapi over top-level documents (an episode's BM25 text includes its
facts' text) and a FAISS inner-product index over every document's normalized vector
(`IndexFlatIP` below `hnsw_threshold` vectors, `IndexHNSWFlat` above it).

Recall (§5.3): BM25 and dense search each rank top-level documents; RRF (Eq. 62, c = 60)
gives the expansion order; a logistic calibration (Eq. 63) scores episodes and (Eq. 64)
their facts on one 0..1 scale; facts compete with their episodes for k slots, a fact entering
removes its episode from the competition, and selected facts come back nested under their
episode, which takes its best fact's score.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections import OrderedDict
from collections.abc import AsyncIterable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from core.bm25 import Bm25, top_k
from memory.embeddings import Embedder, Vectors
from memory.index_files import IndexFiles, owner_key
from memory.tokenize import tokenize

DocKind = Literal["episode", "fact", "note", "profile", "case", "verdict"]
Channel = Literal["lex", "dense"]
ALL_CHANNELS: frozenset[Channel] = frozenset({"lex", "dense"})
# Query vectors kept for reuse (384 floats each: 1.5 KB).
QUERY_VECTORS_KEPT = 256


@dataclass(frozen=True)
class Doc:
    """One indexed record; a fact's `parent` is its episode id (other kinds have none)."""

    id: str
    owner: str
    kind: DocKind
    text: str
    parent: str | None = None


@dataclass
class Hit:
    """A recalled document: calibrated `score` (0..1), channel ranks, RRF and nested facts."""

    doc: Doc
    score: float
    ranks: tuple[int | None, int | None]  # (bm25 rank, dense rank), one-based, None = missed
    rrf: float
    children: list[Hit] = field(default_factory=list)


@dataclass(frozen=True)
class IndexSettings:
    """Tunables; the paper fixes c = 60 and α_mix = 1, the rest are this index's choices."""

    hnsw_threshold: int = 5000  # vectors per owner above which FAISS switches to HNSW
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    rrf_c: float = 60.0  # Eq. 62
    # Eq. 63 coefficients (the paper leaves them to the backend). MiniLM's cosines are
    # compressed (unrelated short texts ≈ 0.1, a strong match ≈ 0.4–0.6), so at w_dense = 8 a
    # strong semantic match was worth less than one incidental word; the offset puts a
    # cosine of 0.5 with no lexical evidence at 0.5.
    w_dense: float = 16.0
    w_lex: float = 10.0
    b_off: float = -8.0
    # Without a dense term scores would sit low; keyword-only mode shifts the offset so a
    # full lexical match lands on a comparable scale.
    b_off_keyword: float = -2.0
    alpha_mix: float = 1.0  # Eq. 64
    pool_min: int = 50  # episodes each channel returns: max(pool_min, pool_factor * k)
    pool_factor: int = 5
    patience: int = 10  # expansion stops when the selection is unchanged this many steps
    compact_ratio: float = 0.25  # rebuild FAISS when this share of its rows is deleted


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _text_hash(doc: Doc) -> str:
    return hashlib.sha1(f"{doc.kind}\0{doc.parent}\0{doc.text}".encode()).hexdigest()[:16]


@dataclass
class _Channels:
    """Per-query channel results over top-level documents."""

    lex_rank: dict[str, int]
    lex_score: dict[str, float]  # normalized to 0..1 by the query's BM25 upper bound
    dense_rank: dict[str, int]
    query_vec: Vectors | None


class _Partition:
    """One owner's documents, BM25 and vectors. Callers hold `lock`; methods are sync."""

    def __init__(self, owner: str, dimension: int | None, settings: IndexSettings) -> None:
        self.owner = owner
        self.settings = settings
        self.lock = asyncio.Lock()
        self.docs: dict[str, Doc] = {}
        self.hashes: dict[str, str] = {}
        self.children: dict[str, list[str]] = {}
        self.dimension = dimension
        # Vector rows: FAISS ids are row numbers; deleted rows are tombstones (None) until
        # compaction, because HNSW cannot remove vectors.
        self.row_ids: list[str | None] = []
        self.row_of: dict[str, int] = {}
        self.vecs: Vectors = np.zeros((0, dimension or 1), dtype=np.float32)
        self.faiss: Any = None
        self.dead = 0
        self.bm25: Bm25 | None = None
        self.bm25_ids: list[str] = []
        self.fact_tokens: dict[str, list[str]] = {}
        self.bm25_dirty = True
        self.saved = False  # files on disk match memory

    # -- documents ---------------------------------------------------------------------

    def top_level(self, doc: Doc) -> str:
        """The id competing in the episode ranking for `doc` (a fact maps to its parent)."""
        if doc.kind == "fact" and doc.parent is not None and doc.parent in self.docs:
            return doc.parent
        return doc.id

    def put(self, docs: Sequence[Doc], vectors: Vectors | None) -> None:
        """Insert or replace `docs` (with their vectors when dense is on)."""
        self.drop([d.id for d in docs if d.id in self.docs])
        for doc in docs:
            self.docs[doc.id] = doc
            self.hashes[doc.id] = _text_hash(doc)
            if doc.kind == "fact" and doc.parent is not None:
                self.children.setdefault(doc.parent, []).append(doc.id)
        if vectors is not None and len(docs):
            self._append_vectors([d.id for d in docs], vectors)
        self.bm25_dirty = True
        self.saved = False

    def drop(self, ids: Iterable[str]) -> int:
        """Delete `ids` (and their vectors); returns how many existed."""
        removed = 0
        for doc_id in ids:
            doc = self.docs.pop(doc_id, None)
            if doc is None:
                continue
            removed += 1
            self.hashes.pop(doc_id, None)
            if doc.parent is not None and doc.parent in self.children:
                siblings = self.children[doc.parent]
                with contextlib.suppress(ValueError):
                    siblings.remove(doc_id)
            row = self.row_of.pop(doc_id, None)
            if row is not None:
                self.row_ids[row] = None
                self.dead += 1
        if removed:
            self.bm25_dirty = True
            self.saved = False
            self._maybe_compact()
        return removed

    # -- vectors -----------------------------------------------------------------------

    def _append_vectors(self, ids: list[str], vectors: Vectors) -> None:
        start = len(self.row_ids)
        self.vecs = np.concatenate([self.vecs, vectors]) if start else vectors.copy()
        for offset, doc_id in enumerate(ids):
            self.row_of[doc_id] = start + offset
            self.row_ids.append(doc_id)
        use_hnsw = len(self.row_ids) > self.settings.hnsw_threshold
        if self.faiss is None or use_hnsw != self.is_hnsw:
            self._rebuild_faiss()
        else:
            self.faiss.add(vectors)

    @property
    def is_hnsw(self) -> bool:
        """True when the FAISS index is HNSW (above the size threshold)."""
        import faiss  # imported at the first vector index, not at start-up

        return isinstance(self.faiss, faiss.IndexHNSWFlat)

    def _new_faiss(self, rows: int) -> Any:
        import faiss  # imported at the first vector index, not at start-up

        assert self.dimension is not None
        if rows > self.settings.hnsw_threshold:
            index = faiss.IndexHNSWFlat(
                self.dimension, self.settings.hnsw_m, faiss.METRIC_INNER_PRODUCT
            )
            index.hnsw.efConstruction = self.settings.hnsw_ef_construction
            index.hnsw.efSearch = self.settings.hnsw_ef_search
            return index
        return faiss.IndexFlatIP(self.dimension)

    def _rebuild_faiss(self) -> None:
        self.faiss = self._new_faiss(len(self.row_ids))
        if len(self.row_ids):
            self.faiss.add(self.vecs)

    def _maybe_compact(self) -> None:
        if self.dead and self.dead >= self.settings.compact_ratio * len(self.row_ids):
            self.compact()

    def compact(self) -> None:
        """Drop tombstoned rows and rebuild FAISS from the live vectors."""
        keep = [i for i, doc_id in enumerate(self.row_ids) if doc_id is not None]
        self.vecs = np.ascontiguousarray(self.vecs[keep]) if keep else self.vecs[:0]
        self.row_ids = [self.row_ids[i] for i in keep]
        self.row_of = {doc_id: i for i, doc_id in enumerate(self.row_ids) if doc_id}
        self.dead = 0
        self._rebuild_faiss()

    def adopt_vectors(self, faiss_index: Any, row_ids: list[str]) -> None:
        """Install vectors loaded from disk (rows in `row_ids` order, all live)."""
        self.faiss = faiss_index
        self.row_ids = list(row_ids)
        self.row_of = {doc_id: i for i, doc_id in enumerate(row_ids)}
        self.vecs = np.ascontiguousarray(
            faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32
        )
        self.dead = 0
        if (len(row_ids) > self.settings.hnsw_threshold) != self.is_hnsw:
            self._rebuild_faiss()

    def dense_search(self, query: Vectors, pool: int) -> dict[str, int]:
        """Top-level ids ranked by their best vector (own or a fact's) near `query`."""
        if self.faiss is None or self.faiss.ntotal == 0:
            return {}
        fetch = min(self.faiss.ntotal, pool * 4 + self.dead)
        _, rows = self.faiss.search(query, fetch)
        ranked: dict[str, int] = {}
        for row in rows[0]:
            doc_id = self.row_ids[row] if row >= 0 else None
            if doc_id is None:
                continue
            top = self.top_level(self.docs[doc_id])
            if top not in ranked:
                ranked[top] = len(ranked) + 1
                if len(ranked) >= pool:
                    break
        return ranked

    def similarity(self, doc_id: str, query: Vectors) -> float:
        """Cosine similarity of `doc_id`'s vector with the query (0 without a vector)."""
        row = self.row_of.get(doc_id)
        return 0.0 if row is None else float(self.vecs[row] @ query[0])

    # -- BM25 ----------------------------------------------------------------------------

    def ensure_bm25(self) -> None:
        """Rebuild BM25Okapi if documents changed (it is not incremental: O(partition))."""
        if not self.bm25_dirty:
            return
        self.bm25_ids = [d.id for d in self.docs.values() if self.top_level(d) == d.id]
        corpus = [self._bm25_tokens(doc_id) for doc_id in self.bm25_ids]
        # BM25Okapi divides by the corpus size: an empty partition has no BM25 at all.
        self.bm25 = Bm25(corpus) if corpus else None
        self.fact_tokens = {
            d.id: tokenize(d.text) for d in self.docs.values() if self.top_level(d) != d.id
        }
        self.bm25_dirty = False

    def _bm25_tokens(self, doc_id: str) -> list[str]:
        # An episode's lexical text includes its facts so an exact term stated only in a
        # fact still recalls the episode (the paper's BM25 runs over episodes only).
        tokens = tokenize(self.docs[doc_id].text)
        for child in self.children.get(doc_id, []):
            tokens.extend(tokenize(self.docs[child].text))
        return tokens or [""]

    def query_weights(self, q_tokens: list[str]) -> list[float]:
        """Each query term's idf in this partition (0 for a term no document has)."""
        if self.bm25 is None:
            return [0.0] * len(q_tokens)
        return [float(self.bm25.idf.get(t, 0.0)) for t in q_tokens]

    def query_bound(self, q_tokens: list[str]) -> float:
        """The BM25 score no document can reach for this query: Σ idf(t)·(k1 + 1)."""
        if self.bm25 is None:
            return 0.0
        return sum(self.query_weights(q_tokens)) * (float(self.bm25.k1) + 1)

    def lex_search(self, q_tokens: list[str], pool: int) -> tuple[dict[str, int], dict[str, float]]:
        """BM25 ranks of the top `pool` top-level documents, and their lexical scores: BM25
        over the query's bound, times the share of the query's terms (by idf) the document
        contains.

        The share is Lucene's classic coordination factor, weighted by idf: one incidental
        query word (the "learning" of "I am learning Spanish" for "deep learning framework")
        is weak evidence; scored like a match of the whole query, it outranked a strong
        semantic match.
        """
        self.ensure_bm25()
        bound = self.query_bound(q_tokens)
        if self.bm25 is None or bound <= 0:
            return {}, {}
        scores = self.bm25.get_scores(q_tokens)
        coverage = self._coverage(q_tokens)
        ranks: dict[str, int] = {}
        normalized: dict[str, float] = {}
        for i in top_k(scores, pool):
            doc_id = self.bm25_ids[i]
            ranks[doc_id] = len(ranks) + 1
            normalized[doc_id] = float(scores[i]) / bound * float(coverage[i])
        return ranks, normalized

    def _coverage(self, q_tokens: list[str]) -> NDArray[np.float64]:
        """Per top-level document, the idf-weighted share of query terms it contains."""
        assert self.bm25 is not None
        weights = self.query_weights(q_tokens)
        covered = np.zeros(self.bm25.corpus_size)
        for term, weight in zip(q_tokens, weights, strict=True):
            posting = self.bm25.postings.get(term)
            if posting is not None:
                covered[posting[0]] += weight
        return covered / max(sum(weights), 1e-12)

    def fact_lex(self, fact_id: str, q_tokens: list[str]) -> float:
        """A fact's own lexical score (partition statistics), as `lex_search` scores, 0..1."""
        bm25 = self.bm25
        tokens = self.fact_tokens.get(fact_id)
        bound = self.query_bound(q_tokens)
        if bm25 is None or not tokens or bound <= 0:
            return 0.0
        k1, b = bm25.k1, bm25.b
        length_norm = k1 * (1 - b + b * len(tokens) / max(bm25.avgdl, 1e-9))
        weights = self.query_weights(q_tokens)
        total = covered = 0.0
        for term, weight in zip(q_tokens, weights, strict=True):
            tf = tokens.count(term)
            if tf:
                total += bm25.idf.get(term, 0.0) * tf * (k1 + 1) / (tf + length_norm)
                covered += weight
        return total / bound * covered / max(sum(weights), 1e-12)


@dataclass
class _Candidate:
    doc_id: str
    top: str  # the top-level id this candidate represents
    score: float


class _Competition:
    """The bounded candidate set of §5.3: at most k entries, a fact displaces its episode."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.entries: dict[str, _Candidate] = {}
        self.banned: set[str] = set()  # episodes removed because one of their facts entered

    def offer(self, cand: _Candidate) -> bool:
        """Admit `cand` if there is room or it beats the lowest retained score."""
        if cand.doc_id in self.banned:
            return False
        if len(self.entries) >= self.k:
            lowest = min(self.entries.values(), key=lambda c: c.score)
            if cand.score <= lowest.score:
                return False
            del self.entries[lowest.doc_id]
        self.entries[cand.doc_id] = cand
        if cand.doc_id != cand.top:
            self.entries.pop(cand.top, None)
            self.banned.add(cand.top)
        return True

    def selected(self) -> frozenset[str]:
        """The ids currently retained."""
        return frozenset(self.entries)


class HybridIndex:
    """Per-owner hybrid BM25 + dense recall over `Doc`s; keyword-only when `embedder` is None.

    All CPU work (encoding, FAISS, BM25) runs in worker threads; a lock per owner partition
    makes searches safe alongside adds and removals. `directory` (if given) is where `save`
    writes and `load` reads the derived files (`IndexFiles`, memory/index_files.py).
    """

    def __init__(
        self,
        embedder: Embedder | None,
        directory: Path | None = None,
        settings: IndexSettings | None = None,
    ) -> None:
        self.embedder = embedder
        self.directory = directory
        self.settings = settings or IndexSettings()
        self._parts: dict[str, _Partition] = {}
        self._files = IndexFiles(directory, embedder, self._parts)
        # Recent query vectors: one turn recalls the same text from personal memory, group
        # memory and skills, and a person often asks again; the encoder dominates a recall.
        self._query_vectors: OrderedDict[str, Vectors] = OrderedDict()
        self.last_load_reason: str | None = None  # why the last `load` re-encoded, if it did

    @property
    def mode(self) -> Literal["hybrid", "keyword"]:
        """`hybrid` with an embedder, `keyword` without."""
        return "keyword" if self.embedder is None else "hybrid"

    def partition(self, owner: str) -> _Partition:
        """The owner's partition, created empty on first use."""
        part = self._parts.get(owner)
        if part is None:
            dim = self.embedder.dimension if self.embedder is not None else None
            part = self._parts[owner] = _Partition(owner, dim, self.settings)
        return part

    def owners(self) -> list[str]:
        """Owners with at least one document."""
        return [o for o, p in self._parts.items() if p.docs]

    def count(self, owner: str | None = None) -> int:
        """Documents indexed (for one owner, or all)."""
        parts = [self._parts[owner]] if owner in self._parts else []
        if owner is None:
            parts = list(self._parts.values())
        return sum(len(p.docs) for p in parts)

    def vector_count(self, owner: str) -> int:
        """Live vectors in an owner's partition (tombstones excluded)."""
        part = self._parts.get(owner)
        return 0 if part is None else len(part.row_of)

    def faiss_bytes(self) -> int:
        """Bytes of every partition's FAISS index as serialized (the vectors plus graph)."""
        import faiss  # imported at the first vector index, not at start-up

        total = 0
        for part in self._parts.values():
            if part.faiss is not None and part.faiss.ntotal:
                total += int(faiss.serialize_index(part.faiss).nbytes)
        return total

    # -- writes --------------------------------------------------------------------------

    async def add(self, docs: Iterable[Doc]) -> None:
        """Insert or replace documents (incremental: only the touched partitions change)."""
        by_owner: dict[str, list[Doc]] = {}
        for doc in docs:
            by_owner.setdefault(doc.owner, []).append(doc)
        for owner, group in by_owner.items():
            vectors = await self._encode([d.text for d in group])
            part = self.partition(owner)
            async with part.lock:
                await asyncio.to_thread(part.put, group, vectors)

    async def _encode(self, texts: Sequence[str]) -> Vectors | None:
        if self.embedder is None:
            return None
        vectors = await self.embedder.embed(texts)
        if vectors.shape != (len(texts), self.embedder.dimension):
            raise ValueError(f"embedder returned shape {vectors.shape} for {len(texts)} texts")
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def remove(self, ids: Collection[str], owner: str | None = None) -> int:
        """Delete documents by id (from `owner`, or from every partition); persists them."""
        removed = 0
        parts = [self._parts[owner]] if owner in self._parts else []
        if owner is None:
            parts = list(self._parts.values())
        for part in parts:
            async with part.lock:
                count = await asyncio.to_thread(part.drop, ids)
            if count:
                removed += count
                await self._files.persist(part)
        return removed

    async def remove_owner(self, owner: str) -> None:
        """Forget an owner: drop the partition and delete its files."""
        part = self._parts.pop(owner, None)
        if part is not None:
            async with part.lock:
                part.docs.clear()
        if self.directory is not None:
            await asyncio.to_thread(self._files.delete_owner_files, owner)
            await self._files.write_manifest()

    # -- recall --------------------------------------------------------------------------

    async def search(
        self,
        owner: str,
        query: str,
        k: int,
        *,
        kinds: Collection[DocKind] | None = None,
        channels: Collection[Channel] = ALL_CHANNELS,
    ) -> list[Hit]:
        """Recall up to `k` candidates for `owner` (§5.3); facts come nested in episodes.

        `channels` restricts recall to BM25 (`lex`) or dense search (for benchmarks).
        """
        part = self._parts.get(owner)
        if part is None or not part.docs or k <= 0:
            return []
        q_tokens = tokenize(query)
        wanted = frozenset(channels)
        dense = "dense" in wanted and self.embedder is not None
        async with asyncio.TaskGroup() as tasks:
            # The query is encoded while BM25 ranks (numpy releases the interpreter lock); the
            # encoding starts before the partition's lock is taken, which it does not need.
            encoding = tasks.create_task(self._query_vector(query)) if dense else None
            async with part.lock:  # one hold: ranks and scoring see the same documents
                lex = await asyncio.to_thread(self._lex_sync, part, q_tokens, k, wanted)
                q_vec = await encoding if encoding is not None else None
                return await asyncio.to_thread(
                    self._search_sync, part, lex, q_tokens, q_vec, k, kinds
                )

    def forget_query_vectors(self) -> None:
        """Drop the recent query vectors (the next recall of any query encodes it)."""
        self._query_vectors.clear()

    async def _query_vector(self, query: str) -> Vectors | None:
        """The query's vector, from the recent ones when it was encoded lately."""
        cached = self._query_vectors.get(query)
        if cached is not None:
            self._query_vectors.move_to_end(query)
            return cached
        vector = await self._encode([query])
        if vector is not None:
            self._query_vectors[query] = vector
            while len(self._query_vectors) > QUERY_VECTORS_KEPT:
                self._query_vectors.popitem(last=False)
        return vector

    def _lex_sync(
        self, part: _Partition, q_tokens: list[str], k: int, channels: frozenset[Channel]
    ) -> tuple[dict[str, int], dict[str, float]]:
        """BM25's ranks and scores (empty when recall is dense only; the index is still
        built, since fact scores read it)."""
        if "lex" not in channels:
            part.ensure_bm25()
            return {}, {}
        return part.lex_search(q_tokens, self._pool(k))

    def _pool(self, k: int) -> int:
        return max(self.settings.pool_min, self.settings.pool_factor * k)

    def _search_sync(
        self,
        part: _Partition,
        lex: tuple[dict[str, int], dict[str, float]],
        q_tokens: list[str],
        q_vec: Vectors | None,
        k: int,
        kinds: Collection[DocKind] | None,
    ) -> list[Hit]:
        lex_rank, lex_score = lex
        dense_rank = part.dense_search(q_vec, self._pool(k)) if q_vec is not None else {}
        ch = _Channels(lex_rank, lex_score, dense_rank, q_vec)
        order = self._expansion_order(ch, part, kinds)
        return self._compete(part, ch, order, k, q_tokens, kinds)

    def _expansion_order(
        self, ch: _Channels, part: _Partition, kinds: Collection[DocKind] | None
    ) -> list[tuple[str, float]]:
        """Top-level ids with their RRF priority (Eq. 62), highest first."""
        allowed = (
            None if kinds is None else set(kinds) | ({"episode"} if "fact" in kinds else set())
        )
        rrf: dict[str, float] = {}
        for ranks in (ch.lex_rank, ch.dense_rank):
            for doc_id, rank in ranks.items():
                rrf[doc_id] = rrf.get(doc_id, 0.0) + 1.0 / (self.settings.rrf_c + rank)
        order = sorted(rrf.items(), key=lambda item: -item[1])
        if allowed is not None:
            order = [(d, r) for d, r in order if part.docs[d].kind in allowed]
        return order

    def _rel(self, dense: float | None, lex: float) -> float:
        """Eq. 63 (dense None = keyword-only: the lexical term alone, shifted offset)."""
        s = self.settings
        if dense is None:
            return _sigmoid(s.w_lex * lex + s.b_off_keyword)
        return _sigmoid(s.w_dense * dense + s.w_lex * lex + s.b_off)

    def _episode_score(self, part: _Partition, ch: _Channels, doc_id: str) -> float:
        lex = ch.lex_score.get(doc_id, 0.0)
        if ch.query_vec is None:
            return self._rel(None, lex)
        # "zero for a channel that did not recall it" (Eq. 63).
        dense = part.similarity(doc_id, ch.query_vec) if doc_id in ch.dense_rank else 0.0
        return self._rel(dense, lex)

    def _fact_scores(
        self, part: _Partition, ch: _Channels, episode: str, ep_score: float, q_tokens: list[str]
    ) -> list[_Candidate]:
        """Eq. 64 for each fact of `episode`, best first."""
        lex = ch.lex_score.get(episode, 0.0)
        alpha = self.settings.alpha_mix
        out: list[_Candidate] = []
        for fact_id in part.children.get(episode, []):
            if ch.query_vec is not None:
                own = self._rel(part.similarity(fact_id, ch.query_vec), lex)
            else:
                # Keyword-only: no fact embedding, so the fact's own BM25 stands in for it.
                own = self._rel(None, part.fact_lex(fact_id, q_tokens))
            out.append(_Candidate(fact_id, episode, alpha * own + (1 - alpha) * ep_score))
        return sorted(out, key=lambda c: -c.score)

    def _compete(
        self,
        part: _Partition,
        ch: _Channels,
        order: list[tuple[str, float]],
        k: int,
        q_tokens: list[str],
        kinds: Collection[DocKind] | None,
    ) -> list[Hit]:
        comp = _Competition(k)
        ep_scores: dict[str, float] = {}
        with_facts = kinds is None or "fact" in kinds
        unchanged = 0
        for doc_id, _ in order:
            before = comp.selected()
            ep_scores[doc_id] = self._episode_score(part, ch, doc_id)
            if kinds is None or part.docs[doc_id].kind in kinds:
                comp.offer(_Candidate(doc_id, doc_id, ep_scores[doc_id]))
            facts = self._fact_scores(part, ch, doc_id, ep_scores[doc_id], q_tokens)
            for cand in facts if with_facts else []:
                # A fact displaces its episode only when it is at least as relevant;
                # otherwise free slots would fill with the weak facts of a good episode.
                if cand.score < ep_scores[doc_id] or not comp.offer(cand):
                    break  # facts are sorted: if the best one cannot enter, none can
            unchanged = unchanged + 1 if comp.selected() == before else 0
            if unchanged >= self.settings.patience and len(comp.entries) >= k:
                break
        rrf = dict(order)
        return self._respond(part, ch, comp, ep_scores, rrf)

    def _respond(
        self,
        part: _Partition,
        ch: _Channels,
        comp: _Competition,
        ep_scores: dict[str, float],
        rrf: dict[str, float],
    ) -> list[Hit]:
        """Group selected facts under their episode (recovered with its best fact's score)."""
        hits: dict[str, Hit] = {}
        for cand in sorted(comp.entries.values(), key=lambda c: -c.score):
            top = cand.top
            ranks = (ch.lex_rank.get(top), ch.dense_rank.get(top))
            if top not in hits:
                score = cand.score if cand.doc_id != top else ep_scores[top]
                hits[top] = Hit(part.docs[top], score, ranks, rrf.get(top, 0.0))
            if cand.doc_id != top:
                hits[top].children.append(
                    Hit(part.docs[cand.doc_id], cand.score, ranks, rrf.get(top, 0.0))
                )
        return sorted(hits.values(), key=lambda h: -h.score)

    # -- persistence (IndexFiles) ----------------------------------------------------------

    async def save(self) -> None:
        """Write every changed partition and the manifest under `directory`."""
        await self._files.save()

    @classmethod
    async def load(
        cls,
        directory: Path,
        embedder: Embedder | None,
        documents_source: AsyncIterable[Doc],
        settings: IndexSettings | None = None,
    ) -> HybridIndex:
        """Build the index from `documents_source`, reusing saved vectors where valid.

        Vectors are re-encoded (one log line says why) when files are missing, corrupt,
        built with another embedder/dimension, or do not match the source's documents.
        """
        index = cls(embedder, directory, settings)
        index.last_load_reason = await index._files.restore(index, documents_source)
        return index


__all__ = [
    "ALL_CHANNELS",
    "Channel",
    "Doc",
    "DocKind",
    "Hit",
    "HybridIndex",
    "IndexSettings",
    "owner_key",
]
