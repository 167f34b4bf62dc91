"""What a Host turn knows about itself: where it is, who asked, and its id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.ids import ConversationRef


@dataclass(frozen=True)
class TurnContext:
    """Passed to every host tool: the conversation, the author and the turn."""

    conversation: ConversationRef
    turn_id: str
    author_id: str
    author_name: str
    kind: Literal["user", "system"] = "user"
