"""Lexical evidence that a skill applies to a request: what selects skills when no model gate
judges them (offline, `RAVEN_SKILLS_GATE=false`, or a gate call that failed).

Retrieval ranks every skill that shares any word with the request, and BM25 over whole
bodies matches the common words of procedures ("one", "run", "check"), so a rank is no reason
to inject a skill. The threshold used instead: a skill is evident when its name or description
(the skill's own statement of when it applies) contains a query word whose Robertson–Spärck
Jones weight log((N − n + 0.5) / (n + 0.5)) is positive, N being the skills known (the local
catalog and the candidates) and n those whose text contains the word. That weight is the
log-odds a word gives for relevance when nothing else is known, and it is positive exactly when
the word occurs in fewer than half of the skills: a word most skills use tells them apart no
better than chance. A skill's evidence is the sum of those positive weights; one-letter terms
(the `s` of "what's", the `x` of `test_x`) are not words and count for nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from skills.catalog import tokenize
from skills.model import Skill, SkillHit
from skills.names import name_key

MIN_TERM_CHARS: Final = 2


def _words(text: str) -> set[str]:
    return {term for term in tokenize(text) if len(term) >= MIN_TERM_CHARS}


def term_weights(query: str, corpus: Sequence[Skill]) -> dict[str, float]:
    """The query's words that tell the corpus's skills apart, with their (positive) RSJ
    weights; empty for an empty corpus."""
    documents = [_words(f"{s.name}\n{s.description}\n{s.body}") for s in corpus]
    total = len(documents)
    weights: dict[str, float] = {}
    for term in _words(query):
        containing = sum(term in document for document in documents)
        weight = math.log((total - containing + 0.5) / (containing + 0.5))
        if containing and weight > 0:
            weights[term] = weight
    return weights


def evidence(skill: Skill, weights: Mapping[str, float]) -> float:
    """The summed weights of the query words in the skill's name or description (0: none)."""
    applies = _words(f"{skill.name}\n{skill.description}")
    return sum(weight for term, weight in weights.items() if term in applies)


def evident(query: str, hits: Sequence[SkillHit], known: Iterable[Skill]) -> list[SkillHit]:
    """The hits with evidence for `query`, in their given order. `known` (the local catalog)
    joins the hits' own skills as the corpus the weights are taken over; a name is counted
    once."""
    corpus: dict[str, Skill] = {name_key(skill.name): skill for skill in known}
    for hit in hits:
        corpus.setdefault(name_key(hit.name), hit.skill)
    weights = term_weights(query, list(corpus.values()))
    if not weights:
        return []
    return [hit for hit in hits if evidence(hit.skill, weights) > 0]


__all__ = ["MIN_TERM_CHARS", "evidence", "evident", "term_weights"]
