"""Messages that almost meant something the bot understands without a model: a mistyped
control word (`stauts`) or command keyword (`schedlue: …`), and an answer to a question that
is not waiting (`1` after it was answered). Each gets a one-line reply instead of a turn."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

NO_QUESTION_WAITING = "No question is waiting for you here."
# How close a lone word must be to a control word or keyword (difflib's ratio): `stauts`,
# `stpo`, `hlep` and `statsu` are; `hello` (0.67 to `help`) and `start` (0.73 to `status`)
# are not. It must also be a slip of the fingers (`_slip`).
_WORD_CUTOFF = 0.75
# Keywords that start a command line (`schedule: every 2h | …`).
COMMAND_PREFIXES = ("schedule", "watch", "campaign")
_LONE_WORD = re.compile(r"^\s*([a-z]{3,12})\s*[.!?]*\s*$", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*([a-z]{4,12})\s*:", re.IGNORECASE)
# A bare answer to a question: an option number, or an approval's or yes/no's word.
_BARE_ANSWER = re.compile(
    r"^\s*(?:\d{1,2}|approved?|deny|denied|yes|no|y|n)\s*[.!]*\s*$", re.IGNORECASE
)


def did_you_mean_text(meant: str) -> str:
    """The reply to a near miss of `meant` (a control word, or a keyword with its colon)."""
    return f"Did you mean `{meant}`?"


def near_miss(text: str, words: Iterable[str]) -> str | None:
    """What a short message that is not quite a control word or command keyword meant
    (`status`, `schedule:`); None for anything else."""
    lone = _LONE_WORD.match(text)
    if lone is not None:
        return _slipped_into(lone.group(1), tuple(words))
    prefix = _PREFIX.match(text)
    meant = _slipped_into(prefix.group(1), COMMAND_PREFIXES) if prefix is not None else None
    return f"{meant}:" if meant is not None else None


def _slipped_into(typed: str, words: tuple[str, ...]) -> str | None:
    """The word of `words` that `typed` is a slip of (never `typed` itself)."""
    typed = typed.casefold()
    close = difflib.get_close_matches(typed, words, n=1, cutoff=_WORD_CUTOFF)
    meant = str(close[0]) if close else None
    return meant if meant is not None and meant != typed and _slip(typed, meant) else None


def _slip(typed: str, word: str) -> bool:
    """A slip of the fingers: `word`'s letters in another order (`stpo`), or one letter left
    out or doubled (`stats`, `stopp`). A different letter is not one: that makes other real
    words (`step`, `shop`, `state`), which must not be taken for `stop` or `status`."""
    if sorted(typed) == sorted(word):
        return True
    short, long = sorted((typed, word), key=len)
    return len(long) - len(short) == 1 and any(
        long[:i] + long[i + 1 :] == short for i in range(len(long))
    )


def is_bare_answer(text: str) -> bool:
    """True for a message that can only be an answer to a question (`1`, `approve`, `no`)."""
    return _BARE_ANSWER.match(text) is not None
