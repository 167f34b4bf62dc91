"""`status` over the bot's proactive work (campaigns, scheduled tasks and checks), with the
nudge policy in force named once below it when the thread has any."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from core.ids import ConversationRef
from host.nudges.policy import NudgePolicy

StatusSource = Callable[[ConversationRef], Awaitable[str]]


def proactive_status(sources: Sequence[StatusSource], policy: NudgePolicy) -> StatusSource:
    """One status source: each of `sources`' lines, then the policy when any said something."""

    async def status(conv: ConversationRef) -> str:
        said = [text for source in sources if (text := await source(conv))]
        return "\n".join([*said, policy.describe()]) if said else ""

    return status
