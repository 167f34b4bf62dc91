"""The port through which the core asks whether work may spend on models now.

Asked before a turn's first model call (a person's message, a scheduled firing), before
each node of a run is dispatched, and before a campaign's model decision: the answer is
None (go on) or the sentence that says why not, with the figures.
"""

from __future__ import annotations

from typing import Protocol

from core.ids import ConversationRef


class SpendGate(Protocol):
    """Whether `person`'s work in `conversation` may start more model calls today."""

    async def refusal(self, person: str, conversation: ConversationRef) -> str | None:
        """None when within every budget; else why not, in plain words with the figures."""
        ...
