"""Interactive prompts (approvals, choices, free text) as the core sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from core.ids import ConversationRef

PromptKind = Literal["approval", "choice", "free_text"]
PromptState = Literal["pending", "answered", "expired", "cancelled"]

APPROVE = "Approve"
DENY = "Deny"


@dataclass(frozen=True)
class Prompt:
    """One persisted question to a person, with who may answer it and how it ended."""

    id: str
    nonce: str
    kind: PromptKind
    question: str
    options: tuple[str, ...]
    requester: str
    allowed_responders: tuple[str, ...]
    conversation: ConversationRef
    created_at: float
    expires_at: float
    state: PromptState = "pending"
    answer: str | None = None
    answered_by: str | None = None
    purpose: str = "ask_user"
    payload: dict[str, Any] = field(default_factory=dict)
    message_id: str | None = None
    decided_at: float | None = None

    @property
    def approved(self) -> bool:
        """True only for an answered approval whose answer is Approve (fails closed)."""
        return self.kind == "approval" and self.state == "answered" and self.answer == APPROVE
