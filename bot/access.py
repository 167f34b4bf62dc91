"""Who may talk to the bot where: allowed users, channels, workspaces and roles, admins,
direct messages. One policy for every platform (Slack has no roles; Discord has guilds)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal


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
        rule = self.broken_rule(
            user_id,
            channel_id,
            is_dm=is_dm,
            workspace=workspace,
            roles=roles,
            parent_channel=parent_channel,
        )
        return None if rule is None else _TO_PERSON[rule]

    def broken_rule(
        self,
        user_id: str,
        channel_id: str,
        *,
        is_dm: bool,
        workspace: str | None = None,
        roles: Collection[str] = (),
        parent_channel: str | None = None,
    ) -> Rule | None:
        """The one access rule every way in applies: which rule refuses, or None."""
        if user_id in self.admins:
            return None
        if is_dm and not self.dm_enabled:
            return "dm"
        if not self._person_allowed(user_id, roles):
            return "person"
        if is_dm:
            return None
        if self.allowed_workspaces and workspace not in self.allowed_workspaces:
            return "workspace"
        if self.allowed_channels and not (
            channel_id in self.allowed_channels or parent_channel in self.allowed_channels
        ):
            return "channel"
        return None

    def _person_allowed(self, user_id: str, roles: Collection[str]) -> bool:
        if not self.allowed_users and not self.allowed_roles:
            return True
        if user_id in self.allowed_users:
            return True
        return bool(self.allowed_roles) and any(r in self.allowed_roles for r in roles)


Rule = Literal["dm", "person", "workspace", "channel"]

_TO_PERSON: Final[Mapping[Rule, str]] = {
    "dm": "I don't take direct messages here; mention me in a channel instead.",
    "person": "You're not on this bot's list of allowed users; ask an admin to add you.",
    "workspace": "I'm not enabled on this server; ask an admin to allow it.",
    "channel": "I'm not enabled in this channel; ask an admin, or use an allowed channel.",
}


def said_about(rule: Rule | None) -> str | None:
    """A broken rule said about the person to others (a paused task's thread); None when
    no rule is broken."""
    return None if rule is None else _ABOUT_PERSON[rule]


_ABOUT_PERSON: Final[Mapping[Rule, str]] = {
    "dm": "direct messages are off",
    "person": "not among the allowed users or roles",
    "workspace": "this server is not allowed",
    "channel": "this channel is not allowed",
}
