"""BM25 as both capabilities search with it (memory recall, skill search): rank_bm25's
Okapi with Lucene's non-negative idf, scored through postings, and top-k selection.

Okapi's idf log((N - n + 0.5) / (n + 0.5)) is ≤ 0 for a term in half the documents, so a
small corpus (a personal partition, a catalog of a few skills) would score a real match ≤ 0;
log(1 + …) keeps every match positive and the ranking otherwise the same. rank_bm25 scores by
looping over every document per query term in Python; postings touch only the documents
containing the term (same formula, same results).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from rank_bm25 import BM25Okapi


class Bm25(BM25Okapi):  # type: ignore[misc]
    """BM25Okapi with Lucene's non-negative idf and postings-based scoring."""

    def __init__(self, corpus: list[list[str]]) -> None:
        super().__init__(corpus)
        doc_len = np.asarray(self.doc_len, dtype=np.float64)
        self.length_norm = self.k1 * (1 - self.b + self.b * doc_len / max(self.avgdl, 1e-9))
        self.postings: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}
        lists: dict[str, tuple[list[int], list[int]]] = {}
        for i, freqs in enumerate(self.doc_freqs):
            for term, tf in freqs.items():
                docs, tfs = lists.setdefault(term, ([], []))
                docs.append(i)
                tfs.append(tf)
        for term, (docs, tfs) in lists.items():
            self.postings[term] = (np.asarray(docs), np.asarray(tfs, dtype=np.float64))

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))
        self.average_idf = sum(self.idf.values()) / max(len(self.idf), 1)

    def get_scores(self, query: list[str]) -> NDArray[np.float64]:
        """BM25 score of every document for `query` (repeated terms count again)."""
        scores = np.zeros(self.corpus_size)
        for term in query:
            posting = self.postings.get(term)
            if posting is None:
                continue
            docs, tfs = posting
            scores[docs] += self.idf[term] * tfs * (self.k1 + 1) / (tfs + self.length_norm[docs])
        return scores


def top_k(
    scores: NDArray[np.float64], k: int, tie: Callable[[int], str] | None = None
) -> list[int]:
    """The indices of the `k` best positive scores, best first, ties by `tie(index)` (or by
    index): only the candidates are sorted, never the whole corpus."""
    positive = np.flatnonzero(scores > 0)
    if k <= 0 or positive.size == 0:
        return []
    if positive.size > k:
        # Everything scoring at least the k-th best (ties at the cut included).
        cut = np.partition(scores[positive], positive.size - k)[positive.size - k]
        positive = positive[scores[positive] >= cut]
    candidates: list[int] = positive.tolist()
    if tie is None:
        candidates.sort(key=lambda i: (-float(scores[i]), i))
    else:
        candidates.sort(key=lambda i: (-float(scores[i]), tie(i)))
    return candidates[:k]
