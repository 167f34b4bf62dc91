"""A campaign's one status message: posted when its first round starts, then edited in place
for every round and event (round N running, woke early, resubmitting, waiting, the latest
values), so a campaign of many rounds says its news without a post per round.

What it shows is committed (`status_view`) before the message is posted or edited: a
message posted late (by the lane, a retry or the redelivery after a restart) is brought up to
date when its id arrives, and a restart edits the same message again, never posts another.
Edits are idempotent: the same view gives the same text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from core.keyed import KeyedLocks
from oncall.engine.core import EngineCore
from oncall.model import Measurement
from oncall.ports import PostedHook
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


# How many of a campaign's latest events its status message shows (oldest dropped first).
EVENTS_SHOWN = 3


class StatusView(BaseModel):
    """What the status message shows: the round's line, its clamp note, the last events."""

    model_config = ConfigDict(frozen=True)

    round: int = 0
    icon: str = "▶️"
    state: str = "starting"
    latest: str = ""
    note: str = ""
    events: tuple[str, ...] = ()

    def text(self, record: CampaignRecord) -> str:
        """The message: `▶️ Campaign `c` round 3/15 running on …: latest loss=0.5 (#7).`,
        then the round's clamp note and the latest events, each on a line of its own."""
        head = (
            f"{self.icon} Campaign `{record.id}` round {self.round}/"
            f"{record.spec.budget.rounds} {self.state}: latest {self.latest or 'none yet'}."
        )
        return "\n".join(filter(None, [head, self.note, *self.events]))


def status_key(campaign_id: str) -> str:
    """The idempotency key of the campaign's status message (its edits use it too)."""
    return f"campaign:{campaign_id}:status"


def latest_values(measurements: Sequence[Measurement]) -> str:
    """The last three values, each with its number: `loss=0.5 (#7), loss=0.4 (#8)`."""
    return ", ".join(f"{m.name}={m.value:g} (#{m.id})" for m in measurements[-3:])


class StatusBoard:
    """Keeps each campaign's status message current."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms
        # One read-modify-write of a view at a time (the monitor and a decision may race).
        self._locks = KeyedLocks()

    async def show(self, record: CampaignRecord, *, event: str = "", **changes: object) -> None:
        """Change what the status message shows (`event` joins its latest events; committed
        first), then post or edit it; a failure is logged by the notifier, never raised
        into the campaign."""
        core = self._core
        async with self._locks.hold(record.id):
            current = await core.store.get(record.id)
            if current is None:
                return
            view = _view(current)
            if event:
                changes["events"] = (*view.events, event)[-EVENTS_SHOWN:]
            view = view.model_copy(update=changes)
            await core.store.update(record.id, status_view=view.model_dump_json())
            current = await core.fresh(current)
            await self._publish(current, view)

    async def refresh(self, record: CampaignRecord) -> None:
        """Show the committed view again (after a restart: the same message, edited). A
        message recorded but not posted yet is left to the outbox's redelivery."""
        if record.status_view is not None:
            async with self._locks.hold(record.id):
                await self._publish(record, _view(record), post=False)

    async def _publish(
        self, record: CampaignRecord, view: StatusView, *, post: bool = True
    ) -> None:
        core = self._core
        notifier = core.deps.notifier
        key = status_key(record.id)
        message_id = record.status_message or await notifier.posted_id(record.conversation, key)
        if message_id is None:
            if not post:
                return
            # Not posted yet (or posted and its id still on the way): recorded once under its
            # key, so a second call posts nothing more; the hook catches up on later views.
            await core.notify(
                record,
                view.text(record),
                key=key,
                on_posted=self._posted(record.id, view.text(record)),
                # The campaign's one status message: its rounds' news is edited into it, so
                # it is never held back (the caps never see the rounds at all).
                essential=True,
            )
            return
        if record.status_message is None:
            await core.store.update(record.id, status_message=message_id)
        with contextlib.suppress(Exception):
            await notifier.edit(record.conversation, message_id, view.text(record), key=key)

    def _posted(self, campaign_id: str, posted_text: str) -> PostedHook:
        core = self._core

        async def posted(message_id: str) -> None:
            # Views committed while the post waited in the lane are shown now. Not under the
            # view lock (a notifier may post, and call this, inside `show`): a view that
            # changes meanwhile is shown again before this returns.
            await core.store.update(campaign_id, status_message=message_id)
            shown = posted_text
            while (record := await core.store.get(campaign_id)) is not None:
                text = _view(record).text(record)
                if text == shown:
                    return
                with contextlib.suppress(Exception):
                    await core.deps.notifier.edit(
                        record.conversation, message_id, text, key=status_key(campaign_id)
                    )
                shown = text

        return posted


def _view(record: CampaignRecord) -> StatusView:
    if not record.status_view:
        return StatusView()
    return StatusView.model_validate_json(record.status_view)
