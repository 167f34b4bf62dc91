"""One admission rule for every way work starts (SPEC §12, issue 38).

A live message is judged by the platform's access policy where it comes in. Work that starts
later on someone's behalf (a scheduled firing, a standing check's run, a campaign's wake-up or
resubmit, a held post's release, a `run now`, a resume) must pass the same policy for its
owner *now*: allowed users and channels, the platform's current roles (fetched, never the
roles stored when the work was proposed) and, where the work runs on a machine, that
machine's access. `Admission.admit` is that one function; every such origin calls it.

A refusal is audited (`admission_audit`) and returned with a sentence for the thread that
says who may resume the work; the caller pauses its work (never deletes it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from core.ids import ConversationRef
from core.store import Store

log = logging.getLogger(__name__)

Origin = Literal["firing", "check", "run-now", "resume", "wake-up", "resubmit", "release", "click"]

# Why a machine refuses someone, given their current roles (None: it admits them).
MachineRule = Callable[[tuple[str, ...]], str | None]


@dataclass(frozen=True)
class Standing:
    """What a platform's access policy says of a person in a conversation now.

    `refusal` is None when admitted; `roles` are the person's current platform roles (for
    machine access); `transient` marks a lookup that failed (the platform did not answer):
    the work is skipped this time, not paused."""

    refusal: str | None = None
    roles: tuple[str, ...] = ()
    transient: bool = False


ADMITTED = Standing()


@runtime_checkable
class AccessDirectory(Protocol):
    """How one platform judges a person in a conversation by its live access policy (the
    same policy its ingress applies to messages), with their roles looked up now."""

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        """The person's standing in `conv` now (raises when the platform cannot say)."""
        ...


@dataclass(frozen=True)
class Verdict:
    """The answer to `admit`: the standing it is based on, and what to tell the thread."""

    standing: Standing
    # One sentence for the work's thread: why it stopped and who may resume it.
    notice: str = ""

    @property
    def admitted(self) -> bool:
        """The work may go on."""
        return self.standing.refusal is None

    @property
    def roles(self) -> tuple[str, ...]:
        """The owner's current roles (what the work runs with)."""
        return self.standing.roles


class Admission:
    """Judges work started by the bot's own timers as a live message is judged.

    `directories` are the platforms whose ingress applies an access policy (Slack, Discord);
    a served platform without one (the console, where the operator types) admits as its
    ingress does; a platform the bot does not serve right now cannot be judged, so its work
    is skipped (transient), not paused."""

    def __init__(
        self,
        store: Store,
        directories: Mapping[str, AccessDirectory],
        *,
        served: Collection[str],
        admins: Collection[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._directories = dict(directories)
        self._served = frozenset(served)
        self._admins = frozenset(admins)
        self._clock = clock

    async def admit(
        self,
        origin: Origin,
        owner: str,
        conv: ConversationRef,
        *,
        subject: str,
        owner_name: str = "",
        machine: MachineRule | None = None,
    ) -> Verdict:
        """May `owner`'s work `subject` (a task, check or campaign id) start from `origin`
        in `conv` now? Refusals are audited; the verdict says what to tell the thread."""
        standing = await self._standing(owner, conv)
        if standing.refusal is None and machine is not None:
            refusal = machine(standing.roles)
            if refusal is not None:
                standing = Standing(refusal, standing.roles)
        if standing.refusal is None:
            return Verdict(standing)
        await self._audit(origin, subject, owner, conv, standing)
        who = owner_name or owner
        if standing.transient:
            notice = f"`{subject}` did not start now: {standing.refusal}."
        else:
            notice = (
                f"⏸️ `{subject}` of {who} is paused: {who} no longer passes this bot's access "
                f"rules here ({standing.refusal}). An admin can resume it, or "
                f"{who} once admitted again."
            )
        return Verdict(standing, notice)

    async def _standing(self, owner: str, conv: ConversationRef) -> Standing:
        if conv.platform not in self._served:
            return Standing(f"this bot does not serve {conv.platform} right now", transient=True)
        if owner in self._admins:
            return ADMITTED
        directory = self._directories.get(conv.platform)
        if directory is None:
            return ADMITTED  # its ingress judges nobody either (the operator's console)
        try:
            return await directory.standing(owner, conv)
        except Exception as exc:
            # Fail closed, but only for now: a platform that did not answer is asked again.
            log.warning("access of %s in %s could not be checked: %s", owner, conv.id, exc)
            return Standing(f"{conv.platform} did not say whether its owner may", transient=True)

    async def _audit(
        self,
        origin: Origin,
        subject: str,
        owner: str,
        conv: ConversationRef,
        standing: Standing,
    ) -> None:
        log.info("admission refused %s %s of %s: %s", origin, subject, owner, standing.refusal)
        await self._store.execute(
            "INSERT INTO admission_audit (at, origin, subject, owner, conversation_id, "
            "outcome, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                self._clock(),
                origin,
                subject,
                owner,
                conv.id,
                "skipped" if standing.transient else "refused",
                standing.refusal or "",
            ),
        )
