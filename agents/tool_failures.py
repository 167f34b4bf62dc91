"""How a failed tool call is said: once, whoever repeats it."""

from __future__ import annotations


def failed_text(tool: str, detail: str) -> str:
    """ "`tool` failed: detail". A tool's error result already says it, and a caller that
    shows results adds it again: the prefix is never doubled."""
    prefix = f"`{tool}` failed"
    if detail == prefix or detail.startswith(f"{prefix}:"):
        return detail
    return f"{prefix}: {detail}"


def failure_detail(tool: str, text: str) -> str:
    """What went wrong, without the "`tool` failed: " prefix (for a sentence that says what
    failed in its own words)."""
    prefix = f"`{tool}` failed: "
    return text[len(prefix) :] if text.startswith(prefix) else text
