"""A shell command read the way `/bin/sh` will read it: words after quote removal, with the
parts the shell expands (globs, braces, `$…`, backquotes, `~`) kept apart from literal text.

The permission gate judges what a command runs and which files it can reach from this, not
from the text: `".e"nv` is `.env`, and `.en?` is a glob that can match it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

PieceKind = Literal["lit", "glob", "unknown", "open", "close", "comma"]

_OPERATORS: Final = frozenset(";&|<>()\n")
NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMETERS: Final = frozenset("0123456789@*#?$!-")
_SEQUENCE: Final = re.compile(r"-?\w+\.\.-?\w+(?:\.\.-?\d+)?")
MAX_BRACE_ALTERNATIVES: Final = 64


class ShellParseError(ValueError):
    """The command is not valid shell (an unclosed quote, `${`, `$(` or backquote)."""


@dataclass(frozen=True)
class Piece:
    """One part of a word: literal text, an unquoted glob (`*`, `?`, `[…]`), an expansion whose
    value is unknown here (`$X`, `$(…)`, backquotes, `~`), or unquoted brace syntax."""

    kind: PieceKind
    text: str


@dataclass(frozen=True)
class Word:
    """One shell word as its pieces."""

    pieces: tuple[Piece, ...]

    @property
    def text(self) -> str:
        """The word after quote removal (expansions and globs as written)."""
        return "".join(p.text for p in self.pieces)

    @property
    def expands(self) -> bool:
        """Whether a variable, command substitution or `~` decides part of the word."""
        return any(p.kind == "unknown" for p in self.pieces)

    @property
    def globbed(self) -> bool:
        """Whether the shell may replace the word by file names (a glob or brace list)."""
        return any(p.kind in ("glob", "comma") for p in self.pieces)

    @property
    def plain(self) -> bool:
        """Literal text only: the shell passes it on unchanged."""
        return not (self.expands or self.globbed)


@dataclass(frozen=True)
class Operator:
    """A control or redirection character (`;`, `&`, `|`, `<`, `>`, `(`, `)`, newline)."""

    text: str


Token = Word | Operator


def tokenize(command: str) -> list[Token]:
    """The command's words and operators; `ShellParseError` when the shell could not parse it."""
    return _Reader(command).tokens()


def words_of(command: str) -> list[Word]:
    """The words alone (operators dropped)."""
    return [t for t in tokenize(command) if isinstance(t, Word)]


class _Reader:
    """One pass over a command, POSIX quoting rules (plus bash's `$'…'` and brace lists)."""

    def __init__(self, command: str) -> None:
        self._s = command
        self._i = 0
        self._out: list[Token] = []
        self._pieces: list[Piece] = []
        self._in_word = False

    def tokens(self) -> list[Token]:
        s = self._s
        while self._i < len(s):
            char = s[self._i]
            if char in " \t":
                self._end_word()
                self._i += 1
            elif char in _OPERATORS:
                self._end_word()
                self._out.append(Operator(char))
                self._i += 1
            else:
                self._in_word = True
                self._word_char(char)
        self._end_word()
        return self._out

    def _end_word(self) -> None:
        if self._in_word:
            self._out.append(Word(_merged(self._pieces)))
        self._pieces = []
        self._in_word = False

    def _add(self, kind: PieceKind, text: str) -> None:
        self._pieces.append(Piece(kind, text))

    def _word_char(self, char: str) -> None:
        s, i = self._s, self._i
        if char == "\\":
            if s.startswith("\\\n", i):
                self._i += 2  # a line continuation joins the lines
            else:
                self._add("lit", s[i + 1 : i + 2] or "\\")
                self._i += 2
        elif char == "'":
            end = s.find("'", i + 1)
            if end == -1:
                raise ShellParseError("an unclosed single quote")
            self._add("lit", s[i + 1 : end])
            self._i = end + 1
        elif char == '"':
            self._double_quoted()
        elif char == "$":
            self._dollar(quoted=False)
        elif char == "`":
            self._backquoted()
        elif char == "~" and self._tilde_position():
            end = i + 1
            while end < len(s) and (s[end].isalnum() or s[end] in "_.-+"):
                end += 1
            self._add("unknown", s[i:end])
            self._i = end
        else:
            self._unquoted(char)

    def _unquoted(self, char: str) -> None:
        i = self._i
        self._i += 1
        if char in "*?":
            self._add("glob", char)
        elif char == "[" and (end := _bracket_end(self._s, i)) is not None:
            self._add("glob", self._s[i : end + 1])
            self._i = end + 1
        elif char in "{},":
            self._add({"{": "open", "}": "close", ",": "comma"}[char], char)  # type: ignore[arg-type]
        else:
            self._add("lit", char)

    def _tilde_position(self) -> bool:
        # `~` expands at a word's start and after `=` or `:` (assignments, PATH-like lists).
        if not self._pieces:
            return True
        last = self._pieces[-1]
        return last.kind == "lit" and last.text[-1:] in ("=", ":")

    def _double_quoted(self) -> None:
        s = self._s
        self._i += 1
        while self._i < len(s):
            char = s[self._i]
            if char == '"':
                self._i += 1
                if not self._pieces:
                    self._add("lit", "")  # `""` is a word of its own
                return
            if char == "\\" and s[self._i + 1 : self._i + 2] in ("$", "`", '"', "\\", "\n"):
                if s[self._i + 1] != "\n":
                    self._add("lit", s[self._i + 1])
                self._i += 2
            elif char == "$":
                self._dollar(quoted=True)
            elif char == "`":
                self._backquoted()
            else:
                self._add("lit", char)
                self._i += 1
        raise ShellParseError("an unclosed double quote")

    def _dollar(self, *, quoted: bool) -> None:
        s, start = self._s, self._i
        nxt = s[start + 1 : start + 2]
        if nxt == "{":
            end = _closing(s, start + 2, "{", "}")
        elif nxt == "(":
            end = _closing(s, start + 2, "(", ")")
        elif nxt in ("'", '"') and not quoted:
            end = _quote_end(s, start + 2, nxt)
        elif nxt and (nxt in _SPECIAL_PARAMETERS or NAME.match(nxt)):
            match = NAME.match(s, start + 1)
            end = match.end() - 1 if match else start + 1
        else:
            self._add("lit", "$")
            self._i += 1
            return
        self._add("unknown", s[start : end + 1])
        self._i = end + 1

    def _backquoted(self) -> None:
        end = _quote_end(self._s, self._i + 1, "`")
        self._add("unknown", self._s[self._i : end + 1])
        self._i = end + 1


def _merged(pieces: list[Piece]) -> tuple[Piece, ...]:
    out: list[Piece] = []
    for piece in pieces:
        if out and piece.kind == "lit" and out[-1].kind == "lit":
            out[-1] = Piece("lit", out[-1].text + piece.text)
        else:
            out.append(piece)
    return tuple(out)


def _bracket_end(s: str, start: int) -> int | None:
    """Where the bracket expression opened at `start` closes (`]` first in it is literal)."""
    i = start + 1
    if s[i : i + 1] in ("!", "^"):
        i += 1
    if s[i : i + 1] == "]":
        i += 1
    while i < len(s) and s[i] not in " \t'\"\\" and s[i] not in _OPERATORS:
        if s[i] == "]":
            return i
        i += 1
    return None


def _quote_end(s: str, start: int, quote: str) -> int:
    i = start
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == quote:
            return i
        i += 1
    raise ShellParseError(f"an unclosed {quote}")


def _closing(s: str, start: int, opening: str, closing: str) -> int:
    """The index of the `closing` that balances an `opening` just before `start`."""
    depth, i = 1, start
    while i < len(s):
        char = s[i]
        if char == "\\":
            i += 2
            continue
        if char in ("'", '"', "`"):
            i = _quote_end(s, i + 1, char) + 1
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ShellParseError(f"an unclosed ${opening}")


# -- brace lists and path segments -----------------------------------------------------------


def brace_alternatives(word: Word) -> list[tuple[Piece, ...]]:
    """The words bash's brace expansion makes of `word` (`a{b,c}` → `ab`, `ac`); a list too
    long to spell out becomes one unknown piece. Without brace lists, `[word.pieces]`."""
    return _expand(word.pieces)


def _expand(pieces: tuple[Piece, ...]) -> list[tuple[Piece, ...]]:
    group = _brace_group(pieces)
    if group is None:
        return [tuple(Piece("lit", p.text) if p.kind in _BRACE_KINDS else p for p in pieces)]
    start, end, commas = group
    before, after = pieces[:start], pieces[end + 1 :]
    if not commas:  # `{a..z}`: a sequence this reader does not spell out
        return _expand((*before, Piece("unknown", "{…}"), *after))
    bounds = [start, *commas, end]
    parts = [pieces[a + 1 : b] for a, b in itertools.pairwise(bounds)]
    out: list[tuple[Piece, ...]] = []
    for part in parts:
        out += _expand((*before, *part, *after))
        if len(out) > MAX_BRACE_ALTERNATIVES:
            return _expand((*before, Piece("unknown", "{…}"), *after))
    return out


_BRACE_KINDS: Final = frozenset({"open", "close", "comma"})


def _brace_group(pieces: tuple[Piece, ...]) -> tuple[int, int, list[int]] | None:
    """The first `{…}` that bash expands: (open index, close index, top-level comma indices)."""
    for start, piece in enumerate(pieces):
        if piece.kind != "open":
            continue
        depth, commas = 0, list[int]()
        for index in range(start + 1, len(pieces)):
            kind = pieces[index].kind
            if kind == "open":
                depth += 1
            elif kind == "close" and depth > 0:
                depth -= 1
            elif kind == "close":
                inner = "".join(p.text for p in pieces[start + 1 : index])
                if commas or _SEQUENCE.fullmatch(inner):
                    return start, index, commas
                break
            elif kind == "comma" and depth == 0:
                commas.append(index)
    return None


@dataclass(frozen=True)
class Segment:
    """One `/`-separated part of a word, as a pattern over file names."""

    pieces: tuple[Piece, ...]

    @property
    def fnmatch(self) -> str:
        """An `fnmatch` pattern (an unknown expansion matches anything)."""
        return "".join(_fn(p) for p in self.pieces)

    @property
    def example(self) -> str:
        """One name the segment matches (wildcards filled in as little as possible)."""
        return "".join(_example(p) for p in self.pieces)

    @property
    def literal(self) -> bool:
        """No wildcard and no expansion: the segment is exactly `example`."""
        return all(p.kind == "lit" for p in self.pieces)

    @property
    def leading_dot(self) -> bool:
        """Starts with a literal `.` (only such globs match dot files)."""
        return bool(self.pieces) and self.pieces[0].kind == "lit" and self.pieces[0].text[:1] == "."

    @property
    def leading_unknown(self) -> bool:
        """Starts with an expansion (which may itself start with `.`)."""
        return bool(self.pieces) and self.pieces[0].kind == "unknown"

    @property
    def specific(self) -> bool:
        """Has a literal letter or digit (a bare `*` or `$X` could be any name at all)."""
        return any(p.kind == "lit" and any(c.isalnum() for c in p.text) for p in self.pieces)

    @property
    def unknown(self) -> bool:
        """Contains an expansion (which may also hold `/`)."""
        return any(p.kind == "unknown" for p in self.pieces)

    @property
    def dotdot(self) -> bool:
        """Is `..`."""
        return self.literal and self.example == ".."


def segments(pieces: tuple[Piece, ...]) -> list[Segment]:
    """The non-empty path segments of a word (split at literal `/`)."""
    out: list[Segment] = []
    current: list[Piece] = []
    for piece in pieces:
        if piece.kind != "lit" or "/" not in piece.text:
            current.append(piece)
            continue
        first, *rest = piece.text.split("/")
        if first:
            current.append(Piece("lit", first))
        for part in rest:
            out.append(Segment(tuple(current)))
            current = [Piece("lit", part)] if part else []
    out.append(Segment(tuple(current)))
    return [s for s in out if s.pieces and s.fnmatch not in ("", ".")]


def values_of(pieces: tuple[Piece, ...]) -> Iterator[tuple[Piece, ...]]:
    """The word, and what follows its first literal `=` (`--file=x`, `NAME=x` name `x` too)."""
    yield pieces
    for index, piece in enumerate(pieces):
        if piece.kind == "lit" and "=" in piece.text:
            rest = piece.text.split("=", 1)[1]
            yield (Piece("lit", rest), *pieces[index + 1 :]) if rest else pieces[index + 1 :]
            return


def _fn(piece: Piece) -> str:
    if piece.kind == "glob":
        return piece.text.replace("[^", "[!", 1) if piece.text.startswith("[^") else piece.text
    if piece.kind == "unknown":
        return "*"
    return re.sub(r"([*?\[])", r"[\1]", piece.text)


def _example(piece: Piece) -> str:
    if piece.kind == "lit":
        return piece.text
    if piece.text == "?":
        return "x"
    if piece.kind == "glob" and piece.text.startswith("[") and piece.text[1:2] not in ("!", "^"):
        return piece.text[1]
    return ""
