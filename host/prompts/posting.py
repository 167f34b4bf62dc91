"""Prompt messages on their platforms: shown once stored, closed once decided."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from core.ids import ConversationRef
from host.prompts.prompt_store import PromptStore
from host.runtime.ports import PromptSurface
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)


class PromptPoster:
    """Shows, closes and privately answers through each platform's prompt surface.

    A surface failing never loses a prompt: it stays pending and answerable by text."""

    def __init__(
        self,
        records: PromptStore,
        surfaces: Mapping[str, PromptSurface],
        clock: Callable[[], float],
    ) -> None:
        self._records = records
        self._surfaces = dict(surfaces)
        self._clock = clock

    def can_show(self, platform: str) -> bool:
        """True when prompts of `platform` have a surface to appear on."""
        return platform in self._surfaces

    async def show(self, prompt: Prompt) -> Prompt:
        """Display a stored prompt on its platform and remember the message id."""
        surface = self._surfaces.get(prompt.conversation.platform)
        if surface is None:
            log.warning(
                "no prompt surface for %r; prompt %s is answerable by text only",
                prompt.conversation.platform,
                prompt.id,
            )
            return prompt
        try:
            message_id = await surface.show_prompt(prompt)
        except Exception:
            log.exception("showing prompt %s failed; it stays pending", prompt.id)
            return prompt
        if not await self._records.record_shown(prompt.id, message_id, self._clock()):
            # Answered (e.g. clicked) before the post returned, so whoever decided could not
            # edit a message whose id was unknown: close it here, or its buttons stay live.
            decided = await self._records.get(prompt.id)
            if decided is not None:
                await self.close(decided)
                return decided
        return replace(prompt, message_id=message_id)

    async def close(self, prompt: Prompt) -> None:
        """Show a decided prompt's outcome in its message (idempotent; failures logged)."""
        surface = self._surfaces.get(prompt.conversation.platform)
        if surface is None:
            return
        try:
            await surface.close_prompt(prompt)
        except Exception:
            log.exception("closing prompt %s on %s failed", prompt.id, prompt.conversation.platform)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> bool:
        """Tell one person something only they see; False when it could not be said."""
        surface = self._surfaces.get(conv.platform)
        if surface is None:
            return False
        try:
            await surface.notify_private(conv, user_id, text)
        except Exception:
            log.exception("a private note to %s in %s failed", user_id, conv.id)
            return False
        return True
