"""Who may talk to the bot where: allowed users and channels, admins, direct messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AccessPolicy:
    """Empty allow-lists mean everyone / everywhere; admins are always allowed."""

    allowed_users: frozenset[str] = frozenset()
    allowed_channels: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    dm_enabled: bool = True

    @classmethod
    def from_lists(
        cls,
        *,
        allowed_users: Sequence[str],
        allowed_channels: Sequence[str],
        admins: Sequence[str],
        dm_enabled: bool,
    ) -> AccessPolicy:
        """Build from the settings' comma-separated lists."""
        return cls(
            frozenset(allowed_users), frozenset(allowed_channels), frozenset(admins), dm_enabled
        )

    def refusal(self, user_id: str, channel_id: str, *, is_dm: bool) -> str | None:
        """None when allowed, else a short explanation for the refused user."""
        if user_id in self.admins:
            return None
        if is_dm and not self.dm_enabled:
            return "I don't take direct messages here; mention me in a channel instead."
        if self.allowed_users and user_id not in self.allowed_users:
            return "You're not on this bot's list of allowed users; ask an admin to add you."
        if not is_dm and self.allowed_channels and channel_id not in self.allowed_channels:
            return "I'm not enabled in this channel; ask an admin, or use an allowed channel."
        return None
