"""Who may answer a prompt, and what someone who may not hears."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from host.runtime.people import People
from host.runtime.prompt_record import Prompt, PromptKind


@dataclass(frozen=True)
class PromptPolicy:
    """The deployment's prompt settings: who may always answer, and for how long prompts wait.

    Admins may answer any prompt; approvers may answer approvals asked after they were named.
    """

    admins: frozenset[str] = frozenset()
    approvers: tuple[str, ...] = ()
    default_expiry_seconds: float = 1800

    def __post_init__(self) -> None:
        if self.default_expiry_seconds <= 0:
            raise ValueError("default_expiry_seconds must be positive")


class Responders:
    """Decides who may answer, by the prompt's stored responders and the current admins."""

    def __init__(self, policy: PromptPolicy, people: People) -> None:
        self._policy = policy
        # Who is named in refusals: display names, not ids.
        self._people = people

    def allowed(
        self,
        kind: PromptKind,
        requester: str,
        extra: Sequence[str],
        responders: Sequence[str] | None,
    ) -> tuple[str, ...]:
        """Who may answer a new prompt: the requester (approvers too for an approval) and
        `extra`, or exactly `responders` when given."""
        if responders is not None:
            return _unique(responders)
        approvers = self._policy.approvers if kind == "approval" else ()
        return _unique([requester, *approvers, *extra])

    def may_answer(self, prompt: Prompt, responder_id: str) -> bool:
        """True for a stored responder or an admin."""
        # Admins are checked now, not stored, so a changed admin list applies to old prompts.
        return responder_id in prompt.allowed_responders or responder_id in self._policy.admins

    async def refusal(self, prompt: Prompt) -> str:
        """What someone who may not answer `prompt` is told: who may."""
        conv = prompt.conversation
        requester = await self._people.name(conv, prompt.requester)
        if prompt.requester not in prompt.allowed_responders:
            names = await self._people.names(conv, prompt.allowed_responders)
            return f"Only {', '.join(names)} or an admin can answer this."
        if prompt.kind == "approval":
            return f"Only {requester} or an approver can answer this."
        if len(prompt.allowed_responders) > 1:
            return f"Only {requester} or the people they asked can answer this."
        return f"Only {requester} can answer this."


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))
