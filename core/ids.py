"""Identifiers every layer shares: where a conversation lives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConversationRef:
    """Where a conversation lives: platform, workspace, channel, thread root.

    Platform-neutral: a DM is a channel whose thread is its own root; adapters map their
    ids (Slack `D…`/`ts`, Discord channel/thread snowflakes) onto these four fields.
    """

    platform: str
    workspace: str
    channel: str
    thread: str

    @property
    def id(self) -> str:
        """The stable conversation id used as key everywhere."""
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.thread}"

    @property
    def channel_key(self) -> str:
        """The channel the conversation is in (per-channel limits count by it)."""
        return f"{self.platform}:{self.workspace}:{self.channel}"

    @classmethod
    def parse(cls, conversation_id: str) -> ConversationRef:
        """Inverse of `id` (platform ids never contain ':')."""
        parts = conversation_id.split(":", 3)
        if len(parts) != 4:
            raise ValueError(f"not a conversation id: {conversation_id!r}")
        return cls(*parts)
