"""Top-k selection over BM25 scores: the best positive scores, best first, ties broken the
same way a full sort would break them."""

from __future__ import annotations

import numpy as np

from core.bm25 import Bm25, top_k


def test_top_k_matches_a_full_sort_ties_and_all() -> None:
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 5, size=2_000).astype(np.float64)  # many ties, many zeros
    names = [f"skill-{(i * 7919) % 2_000:04d}" for i in range(scores.size)]
    for k in (1, 3, 10, 500, 5_000):
        full = sorted(
            (i for i in range(scores.size) if scores[i] > 0), key=lambda i: (-scores[i], names[i])
        )[:k]
        assert top_k(scores, k, lambda i: names[i]) == full
        by_index = sorted(
            (i for i in range(scores.size) if scores[i] > 0), key=lambda i: (-scores[i], i)
        )[:k]
        assert top_k(scores, k) == by_index
    assert top_k(np.zeros(10), 3) == [] and top_k(scores, 0) == []


def test_postings_scores_equal_rank_bm25s_loop() -> None:
    corpus = [["deploy", "the", "service"], ["train", "model"], ["deploy", "model", "model"]]
    index = Bm25(corpus)
    expected = [
        sum(
            index.idf.get(t, 0.0)
            * doc.get(t, 0)
            * (index.k1 + 1)
            / (doc.get(t, 0) + index.k1 * (1 - index.b + index.b * n / index.avgdl))
            for t in ["deploy", "model"]
        )
        for doc, n in zip(index.doc_freqs, index.doc_len, strict=True)
    ]
    assert np.allclose(index.get_scores(["deploy", "model"]), expected)
