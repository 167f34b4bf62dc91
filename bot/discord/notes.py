"""Private notes through interactions: while someone's click is being handled, what the bot
tells them alone goes to that interaction as an ephemeral message (no DM needed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import discord

from bot.discord.keys import interaction_conversation

# How long a click's interaction answers private notes for its user (ephemeral follow-ups).
INTERACTION_NOTE_SECONDS = 10.0


class HeldInteractions:
    """(conversation id, user id) → the interaction being handled for them, and since when."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._held: dict[tuple[str, str], tuple[discord.Interaction, float]] = {}

    @contextmanager
    def answering(self, interaction: discord.Interaction) -> Iterator[None]:
        """While a click is handled, private notes to its user go to the interaction."""
        key = (interaction_conversation(interaction).id, str(interaction.user.id))
        self._held[key] = (interaction, self._clock())
        try:
            yield
        finally:
            self._held.pop(key, None)

    def current(self, conversation_id: str, user_id: str) -> discord.Interaction | None:
        """The interaction that may carry a note to `user_id` now, if any."""
        held = self._held.get((conversation_id, user_id))
        if held is None or self._clock() - held[1] >= INTERACTION_NOTE_SECONDS:
            return None
        return held[0]


async def followup(interaction: discord.Interaction, text: str) -> None:
    """An ephemeral message to whoever interacted (responding first if nothing was sent)."""
    if interaction.response.is_done():
        await interaction.followup.send(text[:2000], ephemeral=True)
    else:
        await interaction.response.send_message(text[:2000], ephemeral=True)
