"""People named to people: display names from each platform's directory, cleaned, never ids
or mentions where a name is known.

A display name is chosen by its owner, so it is untrusted: it reaches people (never a
command or a model's instructions) with control and invisible characters, mention syntax
(`<@U1>`, `<!here>`, `<#C1>`) and the `@` of `@everyone`, `@here` and `@channel` removed.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final
from zoneinfo import ZoneInfo

from core.ids import ConversationRef
from host.runtime.ports import PeopleDirectory, ZoneDirectory

log = logging.getLogger(__name__)

NAME_CAP: Final = 64
_MENTION_SYNTAX = re.compile(r"<[@#!][^<>]*>")
_BROADCAST = re.compile(r"@+(?=(?:everyone|here|channel)\b)", re.IGNORECASE)


def shown_name(raw: str) -> str:
    """`raw` as a name people may be shown: one line, no control or invisible characters,
    no mention syntax, no angle brackets, at most NAME_CAP characters ("" when nothing is
    left)."""
    kept: list[str] = []
    # NFKC first: fullwidth `＠` and `＜` become the characters the platforms act on.
    for char in unicodedata.normalize("NFKC", raw):
        category = unicodedata.category(char)
        if char.isspace() or category.startswith("Z"):
            kept.append(" ")
        elif not category.startswith("C"):
            kept.append(char)
    text = _MENTION_SYNTAX.sub(" ", "".join(kept))
    text = _BROADCAST.sub("", text.replace("<", " ").replace(">", " "))
    return " ".join(text.split())[:NAME_CAP].rstrip()


class People:
    """Display names across platforms, one directory per platform (ids where none)."""

    def __init__(self, directories: Mapping[str, PeopleDirectory] | None = None) -> None:
        self._directories = dict(directories or {})

    async def name(self, conv: ConversationRef, user_id: str) -> str:
        """How `user_id` is shown to people in `conv`: their cleaned display name, or the
        id when the platform cannot say (a failing directory is logged, never raised)."""
        if not user_id:
            return user_id
        directory = self._directories.get(conv.platform)
        raw = user_id
        if directory is not None:
            try:
                raw = await directory.display_name(user_id)
            except Exception:
                log.warning("no display name for %s on %s", user_id, conv.platform, exc_info=True)
        return shown_name(raw) or shown_name(user_id) or user_id

    async def time_zone(self, conv: ConversationRef, user_id: str) -> str | None:
        """`user_id`'s IANA time zone where their platform knows it (Slack profiles), else
        None (a failing directory is logged, never raised)."""
        directory = self._directories.get(conv.platform)
        if not isinstance(directory, ZoneDirectory):
            return None
        try:
            return await directory.time_zone(user_id)
        except Exception:
            log.warning("no time zone for %s on %s", user_id, conv.platform, exc_info=True)
            return None

    async def zone(self, conv: ConversationRef, user_id: str, default: str) -> str:
        """`user_id`'s zone where their platform knows a valid one, else `default`."""
        named = await self.time_zone(conv, user_id)
        if named:
            try:
                ZoneInfo(named)
            except (ValueError, KeyError):
                log.warning("%s has an unknown time zone %r; using the default", user_id, named)
            else:
                return named
        return default

    async def names(self, conv: ConversationRef, user_ids: Iterable[str]) -> list[str]:
        """`name` of each id, in order."""
        return [await self.name(conv, user_id) for user_id in user_ids]
