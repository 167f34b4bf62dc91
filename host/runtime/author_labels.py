"""How authors and their messages are named to the Host model, so nobody can pass as another.

A label is `name (id)`: the id is the platform's, and a display name is cleaned so it holds no
brackets of any script, no line breaks and no invisible characters. The parenthesised id at
the end of a label therefore always is the author's own: `Alice (U123)` as a display name
becomes `Alice U123 (U999)`. Message bodies are shaped so a line inside one cannot pass as a
header either.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

from agents.models.requester_text import ANSWER_HEADER

NAME_CAP: Final = 64
UNNAMED: Final = "unnamed"
CONTEXT_INDENT: Final = "    "
# A body line that reads like the answer header, or like any header: `name (id):` alone.
_ANSWER_LIKE = re.compile(rf"^[ \t]*{re.escape(ANSWER_HEADER.strip())}\b")
_HEADER_LIKE = re.compile(r"^.*\([^()\n]*\)[ \t]*:[ \t]*$")


def _visible(text: str) -> str:
    """`text` without brackets, control or invisible characters; whitespace collapsed."""
    kept: list[str] = []
    for char in unicodedata.normalize("NFKC", text):
        category = unicodedata.category(char)
        if char.isspace() or category.startswith("Z"):
            kept.append(" ")
        elif category.startswith("C") or category in ("Ps", "Pe"):
            continue  # controls, zero-width and bidi marks, and every kind of bracket
        else:
            kept.append(char)
    return " ".join("".join(kept).split())


def display_name(name: str) -> str:
    """A display name as shown to the model: one line, no brackets, at most NAME_CAP chars."""
    return _visible(name)[:NAME_CAP].rstrip() or UNNAMED


def author_label(name: str, author_id: str) -> str:
    """How an author is named to the model: `name (id)`, unforgeable by a display name."""
    return f"{display_name(name)} ({_visible(author_id).replace(' ', '') or '?'})"


def quote_header_lines(body: str) -> str:
    """`body` with every line that reads like a message header quoted (`> `), so a message
    cannot fake another author's message after it."""
    return _quote(body, lambda line: bool(_ANSWER_LIKE.match(line) or _HEADER_LIKE.match(line)))


def quote_answer_headers(body: str) -> str:
    """`body` with lines that read like the answer header quoted; other lines are left as
    written (the answered message's plan and campaign lines must reach the parser intact)."""
    return _quote(body, lambda line: bool(_ANSWER_LIKE.match(line)))


def _quote(body: str, looks_like_header: Callable[[str], bool]) -> str:
    return "\n".join(f"> {x}" if looks_like_header(x) else x for x in body.split("\n"))


def context_line(name: str, author_id: str, body: str) -> str:
    """One thread-context message: its label, then its body; continuation lines are
    indented, so only a real label ever starts a line."""
    first, *rest = body.splitlines() or [""]
    return "\n".join(
        [f"{author_label(name, author_id)}: {first}", *(f"{CONTEXT_INDENT}{x}" for x in rest)]
    )


def left_out_note(count: int) -> str:
    """The context line saying how many messages by refused people were left out."""
    return f"[{count} message(s) by people not allowed to use the bot were left out.]"
