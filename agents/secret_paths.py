"""Which paths hold the bot's secrets, decided on paths rather than text.

A secret is a `.env` file (not `.env.example`, `.sample`, `.template`), the database
(`raven.db` and its `-wal`/`-shm`/`-journal`), an `.ssh` directory, or a process environment
(`/proc/<pid>/environ`). File tools pass resolved paths; shell words are read as the shell
expands them (quotes removed, globs and brace lists matched against these names, `$X` and `~`
as "could be anything"), and words naming existing files are resolved against the workspace.
"""

from __future__ import annotations

import glob
import itertools
import os
import posixpath
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final

from agents.shell_words import (
    Piece,
    Segment,
    ShellParseError,
    Word,
    brace_alternatives,
    segments,
    values_of,
    words_of,
)

SECRETS_WHAT: Final = (
    "reading the bot's secrets (.env files, raven.db, ssh keys, process environments)"
)
_ENV_FILE: Final = re.compile(r"\.env(?:\.(?!(?:example|sample|template)(?:\.|$)).*)?")
_DATABASE: Final = re.compile(r"\braven\.db\b")
# Names a glob is tried against besides its own filled-in example (`.env.q*` → `.env.q`).
_NAME_EXAMPLES: Final = (
    ".env",
    ".env.local",
    ".env.production",
    ".env.development",
    ".env.test",
    ".ssh",
    "raven.db",
    "raven.db-wal",
    "raven.db-shm",
    "raven.db-journal",
)
MAX_GLOB_MATCHES: Final = 2000


def is_secret_name(name: str) -> bool:
    """Whether a file or directory called `name` holds secrets wherever it is."""
    return bool(_ENV_FILE.fullmatch(name)) or name == ".ssh" or bool(_DATABASE.search(name))


def is_secret_path(path: str) -> bool:
    """Whether `path` (relative or absolute, already resolved by the caller) is or is inside a
    secret location. Only the path's own parts count, so resolve symlinks first."""
    parts = [p for p in posixpath.normpath(path).split("/") if p not in ("", ".")]
    if any(is_secret_name(p) for p in parts):
        return True
    return bool(parts) and parts[-1] == "environ" and "proc" in parts[:-1]


def command_reaches_secret(command: str) -> bool:
    """Whether a word of the shell command can name a secret once the shell has removed quotes
    and expanded globs, brace lists, variables and `~`. Unparseable commands: False (the shell
    refuses them too; the gate's text check still applies)."""
    try:
        words = words_of(command)
    except ShellParseError:
        return False
    return any(_word_reaches_secret(word) for word in words)


def _word_reaches_secret(word: Word) -> bool:
    for alternative in brace_alternatives(word):
        for value in values_of(alternative):
            if _pattern_reaches_secret(segments(value)):
                return True
    return False


def _pattern_reaches_secret(parts: list[Segment]) -> bool:
    if any(_could_be_secret_name(part) for part in parts):
        return True
    if not parts or not _could_match(parts[-1], "environ", any_name=True):
        return False
    return any(p.unknown or p.dotdot or _could_match(p, "proc", any_name=True) for p in parts[:-1])


def _could_be_secret_name(part: Segment) -> bool:
    if part.literal:
        return is_secret_name(part.example)
    names = (*_NAME_EXAMPLES, part.example)
    return any(is_secret_name(name) and _could_match(part, name) for name in names)


def _could_match(part: Segment, name: str, *, any_name: bool = False) -> bool:
    """Whether the shell could expand `part` to `name`. A bare `*` or `$X` matches anything, so
    it counts only where any name is a secret (`/proc/self/*`), unless `any_name` is False."""
    if name.startswith(".") and not (part.leading_dot or part.leading_unknown):
        return False  # the shell's globs match dot files only with a literal leading dot
    if not any_name and not (part.specific or part.leading_dot):
        return False
    return fnmatchcase(name, part.fnmatch)


def secret_targets(command: str, root: Path) -> list[str]:
    """Words of the command that name an existing file which, resolved from `root` (symlinks
    followed, globs expanded as the shell would), is a secret. Blocking: call in a thread."""
    try:
        words = words_of(command)
    except ShellParseError:
        return []
    found: list[str] = []
    for word in words:
        for alternative in brace_alternatives(word):
            for value in values_of(alternative):
                names = _existing(value, root)
                found += [name for name in names if _resolves_to_secret(name, root)]
    return list(dict.fromkeys(found))


def _existing(value: tuple[Piece, ...], root: Path) -> list[str]:
    if not value or any(p.kind == "unknown" for p in value):
        return []
    if any(p.kind == "glob" for p in value):
        pattern = "".join(_glob_text(p) for p in value)
        return list(itertools.islice(glob.iglob(pattern, root_dir=root), MAX_GLOB_MATCHES))
    return ["".join(p.text for p in value)]


def _glob_text(piece: Piece) -> str:
    if piece.kind == "glob":
        return piece.text
    return re.sub(r"([*?\[])", r"[\1]", piece.text)


def _resolves_to_secret(name: str, root: Path) -> bool:
    path = root / name
    try:
        if not os.path.lexists(path):
            return False
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    shown = real.relative_to(root).as_posix() if real.is_relative_to(root) else str(real)
    return is_secret_path(shown)
