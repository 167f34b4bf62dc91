"""Application commands: what an app registered (globally and per guild), as Discord keeps it.

`PUT /applications/{app}/commands` and `PUT /applications/{app}/guilds/{guild}/commands`
overwrite the whole set (what discord.py's `CommandTree.sync` sends); a command that keeps its
name keeps its id, as on Discord. Each overwrite is also kept as one `CommandSync`, so tests
can assert what was synced, where and how often.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CommandRegistry", "CommandSync", "command_problem"]

JSON = dict[str, Any]

MAX_COMMANDS = 100
# CHAT_INPUT names: lowercase letters, digits, - and _ (Discord also allows other scripts).
_NAME = re.compile(r"^[-_\w]{1,32}$")


@dataclass(frozen=True)
class CommandSync:
    """One bulk overwrite: `guild_id` None for the global commands."""

    guild_id: str | None
    commands: tuple[JSON, ...]


def command_problem(index: int, command: Any) -> tuple[str, str, str] | None:
    """Discord's per-command validation: (field path, error code, message) or None."""
    if not isinstance(command, dict):
        return (str(index), "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
    name = str(command.get("name") or "")
    kind = int(command.get("type") or 1)
    if not name or (kind == 1 and (not _NAME.match(name) or name != name.lower())):
        return (f"{index}.name", "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
    description = str(command.get("description") or "")
    if kind == 1 and not 1 <= len(description) <= 100:
        return (
            f"{index}.description",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 100 in length.",
        )
    return None


@dataclass
class CommandRegistry:
    """The commands of one application, global and per guild."""

    app_id: str
    new_id: Callable[[], str]
    global_commands: list[JSON] = field(default_factory=list)
    guild_commands: dict[str, list[JSON]] = field(default_factory=dict)
    syncs: list[CommandSync] = field(default_factory=list)
    _version: int = 0

    def commands(self, guild_id: str | None) -> list[JSON]:
        """The registered set (global for None), as Discord serves it."""
        if guild_id is None:
            return self.global_commands
        return self.guild_commands.get(guild_id, [])

    def overwrite(self, guild_id: str | None, payload: list[JSON]) -> list[JSON]:
        """Replace the set (validate first with `command_problem`)."""
        current = {(c["name"], c["type"]): c for c in self.commands(guild_id)}
        stored = [self._stored(guild_id, body, current) for body in payload]
        if guild_id is None:
            self.global_commands = stored
        else:
            self.guild_commands[guild_id] = stored
        self.syncs.append(CommandSync(guild_id, tuple(payload)))
        return stored

    def upsert(self, guild_id: str | None, body: JSON) -> tuple[JSON, bool]:
        """Create or replace one command by name; (command, created)."""
        current = {(c["name"], c["type"]): c for c in self.commands(guild_id)}
        stored = self._stored(guild_id, body, current)
        kept = [c for c in self.commands(guild_id) if c["id"] != stored["id"]]
        created = len(kept) == len(self.commands(guild_id))
        if guild_id is None:
            self.global_commands = [*kept, stored]
        else:
            self.guild_commands[guild_id] = [*kept, stored]
        return stored, created

    def find(self, name: str, guild_id: str | None) -> JSON | None:
        """The CHAT_INPUT command `name` as a user in `guild_id` sees it (guild set first)."""
        for command in [*(self.commands(guild_id) if guild_id else []), *self.global_commands]:
            if command["name"] == name and command["type"] == 1:
                return command
        return None

    def _stored(self, guild_id: str | None, body: JSON, current: dict[Any, JSON]) -> JSON:
        kind = int(body.get("type") or 1)
        existing = current.get((body["name"], kind))
        self._version += 1
        stored: JSON = {
            "id": existing["id"] if existing else self.new_id(),
            "application_id": self.app_id,
            "version": str(self._version),
            "type": kind,
            "name": body["name"],
            "name_localizations": body.get("name_localizations"),
            "description": body.get("description") or "",
            "description_localizations": body.get("description_localizations"),
            "options": list(body.get("options") or []),
            "default_member_permissions": body.get("default_member_permissions"),
            "nsfw": bool(body.get("nsfw", False)),
            "contexts": body.get("contexts"),
            "integration_types": body.get("integration_types") or [0],
        }
        if guild_id is not None:
            stored["guild_id"] = guild_id
        else:
            stored["dm_permission"] = body.get("dm_permission", True)
        return stored
