"""The delivery boundary: whatever the bot posts or edits reaches people without the
untrusted-data fence markers and preface that models need (`core.fence.unfence`).

The conversation log keeps the text as recorded (the model reads it back as history, fenced);
only the copy handed to the platform is unfenced. Prompts are not passed through here: a
command shown for approval must be shown byte for byte.
"""

from __future__ import annotations

from core.fence import unfence
from core.ids import ConversationRef
from host.runtime.messages import OutboundMessage
from host.runtime.ports import Channel, ThreadStarts


class UnfencedChannel:
    """A `Channel` that unfences every message on its way to `inner`."""

    def __init__(self, inner: Channel) -> None:
        self.inner = inner

    @property
    def platform(self) -> str:
        """The wrapped channel's platform."""
        return self.inner.platform

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post the message as people should read it."""
        return await self.inner.post(conv, _for_people(message))

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit with the text as people should read it."""
        await self.inner.edit(conv, message_id, _for_people(message))

    def channel_level(self, conv: ConversationRef) -> ConversationRef | None:
        """The wrapped channel's, where it starts threads (else None)."""
        inner = self.inner
        return inner.channel_level(conv) if isinstance(inner, ThreadStarts) else None


def _for_people(message: OutboundMessage) -> OutboundMessage:
    text = unfence(message.text)
    return message if text == message.text else message.model_copy(update={"text": text})
