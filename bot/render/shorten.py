"""A text cut to a length at a word boundary, marked with an ellipsis (notification
fallbacks and other one-glance texts a platform caps)."""

from __future__ import annotations

ELLIPSIS = "…"


def shortened(text: str, limit: int) -> str:
    """`text` when it fits `limit` characters, else its start cut after the last whole
    word that fits, with `…` (a single word longer than that is cut where it must)."""
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if len(text) <= limit:
        return text
    room = text[: limit - len(ELLIPSIS) + 1]  # one more: is the cut right before a space?
    space = max(room.rfind(" "), room.rfind("\n"), room.rfind("\t"))
    head = room[:space] if space > 0 else room[:-1]
    return head.rstrip(" \t\n,;:—-") + ELLIPSIS
