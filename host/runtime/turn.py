"""What a Host turn knows about itself: where it is, who asked, why it runs, and its id."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from core.ids import ConversationRef

# Why a turn runs: a person wrote (`user`), the bot itself started it (`system`: a run
# report, an answered question, a wake-up), or a person's scheduled task fired (`scheduled`:
# on their behalf, unattended). Set by the core, never by a platform.
TurnOrigin = Literal["user", "system", "scheduled"]


@dataclass(frozen=True)
class TurnContext:
    """Passed to every host tool, context source and harness: conversation, author, turn."""

    conversation: ConversationRef
    turn_id: str
    author_id: str
    author_name: str
    origin: TurnOrigin = "user"
    text: str = ""  # the message this turn answers (context sources recall against it)
    is_dm: bool = False
    roles: tuple[str, ...] = ()  # the author's platform roles (Discord), for machine access
    task: str = ""  # the scheduled task a `scheduled` turn fires
    # Set once the turn's reply was posted (or the turn ended without one): a background run
    # the turn starts posts nothing before it, so the thread reads in causal order.
    replied: asyncio.Event | None = None
    # The inbound record this turn took up (`in:<platform>:event:<id>`): files a foreground
    # run made follow this turn's reply. Empty: nothing to follow, they go out at once.
    inbound_key: str = ""
