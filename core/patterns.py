"""Regular expressions people supply (a check's `output ~`, a metric's `/REGEX/`, a campaign's
`pattern:`), compiled by RE2 instead of Python's `re`.

Python's `re` backtracks: `^(a+)+$` against 30 characters runs for seconds, doubling with each
more, and a pattern matched on the event loop freezes the whole bot. RE2 (`google-re2`, the
library behind Go's regexp) never backtracks: its time is linear in the input. The
constructs that need backtracking (backreferences, lookarounds, possessive quantifiers,
atomic groups, conditionals) are refused when the pattern is proposed, each named with how to
write it instead. Linear still grows with the compiled program's size times the input's
length, so both are bounded: at most `MAX_PROGRAM_SIZE` instructions, and only the last
`MAX_INPUT_CHARS` characters of a text are searched (its first ones for a metric line, whose
value is where the line starts). RE2 releases the GIL while it matches,
so a caller on the event loop can match in a worker thread (`asyncio.to_thread`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import re2

MAX_PATTERN_CHARS: Final = 500
# RE2's own measure of a pattern's cost. 500 keeps every pattern a check or metric needs
# (`loss[=: ]+(\S+)` is 25, `[0-9a-f]{40}` 84, `\w{100}` 304) and bounds the worst case
# (a state-exploding pattern falls back to RE2's NFA: about 0.25 ms per instruction on
# 16,000 characters on a 2-core VM).
MAX_PROGRAM_SIZE: Final = 500
# Above a check's output (16,000 characters, oncall.probe.OUTPUT_CAP) and a metric line (64 KiB
# kept between reads, oncall.metrics.MAX_LINE_BYTES): what is cut is only ever past those.
MAX_INPUT_CHARS: Final = 65_536
Window = Literal["head", "tail"]
SYNTAX_URL: Final = "https://github.com/google/re2/wiki/Syntax"

# (a fragment of RE2's error message, the construct in words, how to write it instead)
_UNSUPPORTED: Final = (
    ("(?P=", "a named backreference `(?P=name)`", "write the text out again instead"),
    ("(?=", "a lookahead `(?=…)`", "match the text itself instead of looking ahead"),
    ("(?!", "a negative lookahead `(?!…)`", "match what may follow instead (e.g. `[^x]`)"),
    ("(?<=", "a lookbehind `(?<=…)`", "include the preceding text in the pattern instead"),
    ("(?<!", "a negative lookbehind `(?<!…)`", "match what may precede instead (e.g. `[^x]`)"),
    ("(?>", "an atomic group `(?>…)`", "write a plain group `(?:…)`"),
    ("(?(", "a conditional `(?(1)…|…)`", "write the alternatives with `|`"),
    ("(?#", "a comment `(?#…)`", "leave the comment out"),
    ("(?x", "verbose mode `(?x)`", "write the pattern without spaces or comments"),
    ("\\Z", "`\\Z`", "write `\\z` (or `$`) for the end of the text"),
)


class PatternError(ValueError):
    """A pattern RE2 refuses; the message says what is wrong and how to write it instead."""


@dataclass(frozen=True)
class PatternMatch:
    """Where a pattern matched: spans of the whole match (0) and of each group, in the
    searched text's own positions; (-1, -1) for a group that did not take part."""

    text: str
    spans: tuple[tuple[int, int], ...]

    def group(self, index: int = 0) -> str | None:
        start, end = self.spans[index]
        return None if start < 0 else self.text[start:end]

    def start(self, index: int = 0) -> int:
        return self.spans[index][0]

    def end(self, index: int = 0) -> int:
        return self.spans[index][1]


def _options(*, capture: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the user's error, told to them, not logged
    options.never_capture = not capture
    return options


class UserPattern:
    """A user-supplied regular expression, validated when made (PatternError otherwise)."""

    __slots__ = ("_found", "_test", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        if len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError(
                f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS}"
            )
        try:
            self._found = re2.compile(pattern, _options(capture=True))
            # Without groups RE2 answers "does it match" with its DFA alone (faster).
            self._test = re2.compile(pattern, _options(capture=False))
        except re2.error as exc:
            raise PatternError(_explain(pattern, exc)) from None
        size = self._found.programsize
        if size > MAX_PROGRAM_SIZE:
            raise PatternError(
                f"the pattern is too complex ({size} RE2 instructions; at most "
                f"{MAX_PROGRAM_SIZE}): use smaller counts in `{{n,m}}`, fewer alternatives, "
                "or ASCII classes such as `[A-Za-z]` instead of `\\pL`"
            )

    @property
    def groups(self) -> int:
        """How many capture groups it has."""
        return self._found.groups

    def matches(self, text: str, window: Window = "tail") -> bool:
        """Whether it matches in the last (or first) MAX_INPUT_CHARS of `text`."""
        skip = _skip(text, window)
        return self._test.search(text[skip : skip + MAX_INPUT_CHARS]) is not None

    def search(self, text: str, window: Window = "tail") -> PatternMatch | None:
        """Its first match in the last (or first) MAX_INPUT_CHARS of `text` (positions in
        `text`, groups included)."""
        skip = _skip(text, window)
        found = self._found.search(text[skip : skip + MAX_INPUT_CHARS])
        if found is None:
            return None
        spans = tuple(found.span(i) for i in range(self.groups + 1))
        return PatternMatch(
            text, tuple((a + skip, b + skip) if a >= 0 else (a, b) for a, b in spans)
        )

    def __repr__(self) -> str:
        return f"UserPattern({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UserPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)


def _skip(text: str, window: Window) -> int:
    """Where the searched part of `text` starts."""
    return 0 if window == "head" else max(0, len(text) - MAX_INPUT_CHARS)


def _explain(pattern: str, exc: re2.error) -> str:
    """RE2's refusal in words: the unsupported construct and how to write it instead."""
    raw = exc.args[0] if exc.args else ""
    message = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    construct = _unsupported(pattern, message)
    if construct is not None:
        what, instead = construct
        return (
            f"{what} is not supported by RE2, the linear-time engine patterns run on: "
            f"{instead} (syntax: {SYNTAX_URL})"
        )
    return f"not a regular expression RE2 accepts ({message}; syntax: {SYNTAX_URL})"


def _unsupported(pattern: str, message: str) -> tuple[str, str] | None:
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return f"a backreference `{message.rsplit(' ', 1)[-1]}`", "write the text out again"
    if message.startswith("invalid repetition size"):
        return "a count above 1000 in `{n,m}`", "use a count of at most 1000"
    operator = message.rsplit(": ", 1)[-1]
    if message.startswith("bad repetition operator") and operator.endswith("+"):
        return f"a possessive quantifier `{operator}`", "drop its last `+`"
    for fragment, what, instead in _UNSUPPORTED:
        if fragment == "(?P=" and operator == "(?P" and "(?P=" in pattern:
            return what, instead
        if operator == fragment:
            return what, instead
    return None
