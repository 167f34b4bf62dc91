"""The console's people directory: the console has one person, the local user, whose user
name is also their id there."""

from __future__ import annotations

# The console adapter's platform name (conversation keys start with it).
CONSOLE_PLATFORM = "console"


class ConsolePeople:
    """Names console users (a `PeopleDirectory`): the local user name is the id itself."""

    async def display_name(self, user_id: str) -> str:
        """The local user name (the console's author id is that name)."""
        return user_id
