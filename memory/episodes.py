"""Episode formation: what a completed turn says about its author, and whether it continues
the author's last episode. The protocol lets a model decide (online); the deterministic rule
here needs none (offline, and the fallback when a model call fails).

A turn continues the author's last episode in that conversation when their words overlap
enough (same topic), else it opens a new one. Sentences in the author's own words that speak
about themselves become facts; those about the future become foresight valid for two weeks.
The archive note of the episode carries its most frequent content word as a tag. Only the
author's words are memory: the bot's reply (an offline notice, a refusal, a guess) never is.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from memory.archive import NewFact

TOPIC_OVERLAP = 0.2  # Jaccard overlap of content words that keeps the same episode
FORESIGHT_SECONDS = 14 * 86400.0
NARRATIVE_CHARS = 600

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_SELF = re.compile(r"\b(i|i'm|im|i've|i'd|i'll|my|me|mine|we|our|us)\b", re.IGNORECASE)
_FUTURE = re.compile(
    r"\b(will|i'll|going to|plan to|planning|tomorrow|next (week|month|year)|soon|"
    r"later today|upcoming|deadline|by (monday|tuesday|wednesday|thursday|friday))\b",
    re.IGNORECASE,
)
_STOP_WORDS = (
    "a an and are as at be but by can could do does for from had has have how i if in is it "
    "its me my of on or our please so that the their them then there these they this to us "
    "was we were what when where which who why will with would you your yes no not just "
    "about also any all im i'm i've i'd i'll"
)
_STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class TurnMemory:
    """What one completed turn contributes: narrative line, facts, tag, content words."""

    narrative: str
    facts: tuple[NewFact, ...]
    tag: str
    words: frozenset[str]


def content_words(text: str) -> frozenset[str]:
    """Lowercased words without stop words (for topic overlap and tags)."""
    words = (m.lower() for m in _WORD.findall(text))
    return frozenset(w for w in words if len(w) > 2 and not w.isdigit() and w not in _STOP)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two word sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def from_turn(author: str, request: str, *, now: float) -> TurnMemory:
    """The memory a turn leaves: the author's statements about themselves, as facts, and
    what they said as the narrative."""
    facts: list[NewFact] = []
    for raw in _SENTENCE.split(request):
        sentence = raw.strip()
        if len(sentence) < 8 or not _SELF.search(sentence):
            continue
        if _FUTURE.search(sentence):
            facts.append(NewFact("foresight", sentence, now, now + FORESIGHT_SECONDS))
        else:
            facts.append(NewFact("fact", sentence))
    words = content_words(request)
    counts = Counter(w for w in (m.lower() for m in _WORD.findall(request)) if w in words)
    tag = counts.most_common(1)[0][0] if counts else ""
    narrative = f"{author} said: {_clip(request)}"
    return TurnMemory(narrative[:NARRATIVE_CHARS], tuple(facts), tag, words)


def same_topic(previous_narrative: str, turn: TurnMemory) -> bool:
    """True when the turn continues the previous episode's topic."""
    return overlap(content_words(previous_narrative), turn.words) >= TOPIC_OVERLAP


def _clip(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class FormedTurn:
    """A turn's memory and whether it continues the previous episode's topic."""

    memory: TurnMemory
    continues: bool


class EpisodeFormer(Protocol):
    """Decides a turn's episode boundary, narrative, facts and foresight from the author's
    words alone (never the bot's reply)."""

    async def form(
        self, author: str, request: str, *, previous: str | None, now: float
    ) -> FormedTurn:
        """Form the memory of one turn; `previous` is the episode it may continue."""
        ...


class RuleFormer:
    """The deterministic rule: self-statements become facts, word overlap keeps the topic."""

    async def form(
        self, author: str, request: str, *, previous: str | None, now: float
    ) -> FormedTurn:
        """Form the memory of one turn without a model."""
        memory = from_turn(author, request, now=now)
        return FormedTurn(memory, previous is not None and same_topic(previous, memory))
