"""Notices (what the bot says on its own: campaigns, evolution runs) enter the conversation's
lane as system work, recorded before they post.

`send` records the notice in the outbox's message log (durable, `pending`) and queues a
system job on the conversation's lane that posts it; it never waits for that job, because a
campaign (or an evolution run) is started inside a user turn of that same lane. A notice
recorded but not posted when the process dies is sent once by the outbox's startup
redelivery. Status-message edits
go straight to the outbox: they change a message already posted and need no lane order.

A notice is posted only once what its conversation received so far was dispatched
(`follow`): a typed approval's confirmation comes before the campaign it starts speaks.

Every notice but a final report or a failure (`essential`) passes the nudge policy: over a
cap, or said here today already, it is not posted; in its owner's quiet hours it is held and
posted when they end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from core.ids import ConversationRef
from host.conversation.lanes import LaneManager, LanesClosed
from host.conversation.outbox import DeliveryError, Outbox
from host.nudges.held import HeldPosts
from host.nudges.policy import Nudge, NudgePolicy
from host.runtime.admission import Admission
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import ChartData
from host.runtime.scheduling import FiredJob
from oncall.ports import PostedHook

log = logging.getLogger(__name__)


class LaneNotifier:
    """Notices in the bot (the campaign engine's notifier among them): persist, then post in
    the lane's order."""

    def __init__(
        self,
        conversation_log: ConversationLog,
        outbox: Outbox,
        lanes: LaneManager,
        *,
        nudges: NudgePolicy | None = None,
        held: HeldPosts | None = None,
        admission: Admission | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self._log = conversation_log
        self._outbox = outbox
        self._lanes = lanes
        self._nudges = nudges
        self._held = held
        # A held notice is released only while its recipient still passes the access rules.
        self._admission = admission
        self._clock = clock
        self._dispatched_in: Callable[[str], Awaitable[None]] | None = None

    def follow(self, dispatched_in: Callable[[str], Awaitable[None]]) -> None:
        """Post a notice only after its conversation's received messages were dispatched
        (the conversation service, built after this notifier, says when)."""
        self._dispatched_in = dispatched_in

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
        chart: ChartData | None = None,
    ) -> None:
        """Record the notice, then queue its post on the lane (not awaited); once per key.
        A routine notice passes the nudge policy first; `chart` goes with its post."""
        # A notice recorded already was admitted before (its key posts it once).
        routine = not essential and await self._log.outbound(idempotency_key) is None
        nudge = Nudge(conv, recipient, text, f"notice {idempotency_key}")
        if routine and not await self._admit(nudge, idempotency_key):
            return
        await self._record_and_queue(conv, text, idempotency_key, on_posted, chart)

    async def _admit(self, nudge: Nudge, key: str) -> bool:
        """Whether to post now: False when the policy holds it back or quiet hours hold it."""
        if self._nudges is None:
            return True
        now = self._clock()
        until = await self._nudges.quiet_until(nudge, datetime.fromtimestamp(now, UTC))
        if not await self._nudges.admit(nudge, now=now):
            return False
        if until is None or self._held is None:
            return True
        log.info("notice %s held by quiet hours until %s", key, until.isoformat())
        await self._held.hold(key, nudge, until, now=now)
        return False

    async def release(self, job: FiredJob) -> None:
        """A held notice's quiet hours ended: post it (once)."""
        if self._held is not None and (post := await self._held.get(str(job.payload["key"]))):
            await self._release(post.key, post.nudge)

    async def recover(self) -> None:
        """At start: post what quiet hours held past their end; re-arm the rest."""
        if self._held is None:
            return
        now = self._clock()
        for post in await self._held.pending():
            if post.release_at.timestamp() <= now:
                await self._release(post.key, post.nudge)
            else:
                await self._held.rearm(post)

    async def _release(self, key: str, nudge: Nudge) -> None:
        assert self._held is not None
        if await self._admitted(nudge):
            await self._record_and_queue(nudge.conversation, nudge.text, key, None)
        await self._held.released(key)

    async def _admitted(self, nudge: Nudge) -> bool:
        """Whether the recipient, whose work the notice is about, still passes (a refusal is
        audited and the notice dropped; a platform that did not answer lets it through:
        saying a notice is no new work)."""
        if self._admission is None or not nudge.recipient:
            return True
        verdict = await self._admission.admit(
            "release", nudge.recipient, nudge.conversation, subject=nudge.source
        )
        return verdict.admitted or verdict.standing.transient

    async def _record_and_queue(
        self,
        conv: ConversationRef,
        text: str,
        idempotency_key: str,
        on_posted: PostedHook | None,
        chart: ChartData | None = None,
    ) -> None:
        # Committed before anything is queued: a crash from here on leaves a pending row
        # that the next start's redelivery posts, and the key keeps it to one post.
        await self._log.record_outbound(conv, idempotency_key=idempotency_key, text=text)
        try:
            job = self._lanes.submit(
                conv.id,
                lambda: self._post(conv, text, idempotency_key, on_posted, chart),
                kind="system",
                label=f"notice {idempotency_key}",
            )
        except LanesClosed:
            log.info("notice %s stays pending until the next start", idempotency_key)
            return
        job.add_done_callback(_consume)

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        """The platform id of a notice once it was posted (by the lane, a retry or a
        redelivery after a restart); None before."""
        message = await self._log.outbound(idempotency_key)
        if message is None or message.delivery != "sent":
            return None
        return message.platform_message_id

    async def edit(
        self,
        conv: ConversationRef,
        message_id: str,
        text: str,
        *,
        key: str,
        chart: ChartData | None = None,
    ) -> None:
        """Edit the round's status message in place, directly (failures are logged); its
        `chart` is drawn where the platform can."""
        await self._outbox.edit(conv, message_id, text, key=key, chart=chart)

    async def _post(
        self,
        conv: ConversationRef,
        text: str,
        idempotency_key: str,
        on_posted: PostedHook | None,
        chart: ChartData | None = None,
    ) -> None:
        if self._dispatched_in is not None:
            # Causal order: the reply to the message that led here (a typed answer's
            # confirmation) is said first.
            await self._dispatched_in(conv.id)
        try:
            posted = await self._outbox.send(
                conv, text, idempotency_key=idempotency_key, chart=chart
            )
        except DeliveryError as exc:
            # Recorded as failed and retried by the outbox (or redelivered at the next start).
            log.warning("notice %s not posted yet: %s", idempotency_key, exc)
            return
        if posted is not None and on_posted is not None:
            await on_posted(posted)


def _consume(job: asyncio.Future[None]) -> None:
    """Nobody awaits a notice job: its failure is logged here instead of lost."""
    if not job.cancelled() and (exc := job.exception()) is not None:
        log.error("a campaign notice job failed", exc_info=exc)
