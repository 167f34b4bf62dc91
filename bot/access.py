"""Who may talk to the bot where: allowed users, channels, workspaces and roles, admins,
direct messages. One policy for every platform (Slack has no roles; Discord has guilds)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AccessPolicy:
    """Empty allow-lists mean everyone / everywhere; admins are always allowed."""

    allowed_users: frozenset[str] = frozenset()
    allowed_channels: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    dm_enabled: bool = True
    allowed_workspaces: frozenset[str] = frozenset()  # Discord guilds
    allowed_roles: frozenset[str] = frozenset()  # a user with any of these roles may speak

    @classmethod
    def from_lists(
        cls,
        *,
        allowed_users: Sequence[str],
        allowed_channels: Sequence[str],
        admins: Sequence[str],
        dm_enabled: bool,
        allowed_workspaces: Sequence[str] = (),
        allowed_roles: Sequence[str] = (),
    ) -> AccessPolicy:
        """Build from the settings' comma-separated lists."""
        return cls(
            frozenset(allowed_users),
            frozenset(allowed_channels),
            frozenset(admins),
            dm_enabled,
            frozenset(allowed_workspaces),
            frozenset(allowed_roles),
        )

    def refusal(
        self,
        user_id: str,
        channel_id: str,
        *,
        is_dm: bool,
        workspace: str | None = None,
        roles: Collection[str] = (),
        parent_channel: str | None = None,
    ) -> str | None:
        """None when allowed, else a short explanation for the refused user.

        With both user and role lists, either admits the user. A thread is allowed when its
        parent channel is (`parent_channel`)."""
        if user_id in self.admins:
            return None
        if is_dm and not self.dm_enabled:
            return "I don't take direct messages here; mention me in a channel instead."
        if not self._person_allowed(user_id, roles):
            return "You're not on this bot's list of allowed users; ask an admin to add you."
        if is_dm:
            return None
        if self.allowed_workspaces and workspace not in self.allowed_workspaces:
            return "I'm not enabled on this server; ask an admin to allow it."
        if self.allowed_channels and not (
            channel_id in self.allowed_channels or parent_channel in self.allowed_channels
        ):
            return "I'm not enabled in this channel; ask an admin, or use an allowed channel."
        return None

    def _person_allowed(self, user_id: str, roles: Collection[str]) -> bool:
        if not self.allowed_users and not self.allowed_roles:
            return True
        if user_id in self.allowed_users:
            return True
        return bool(self.allowed_roles) and any(r in self.allowed_roles for r in roles)
