"""The files a campaign's command runs (`python train.py`, `bash run.sh`, `./x`), looked for in
its working directory before anyone approves it: a command whose script is not there can only
fail, the same way, in every round.

Only what can be told from the words alone is looked for: a relative path that names no
expansion (`$`, `~`, globs) and does not climb out with `..`, up to a `cd` (after one, the
command runs elsewhere). Anything else is left to the round itself.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

# Programs whose first argument that is not an option is the script they run.
_INTERPRETER = re.compile(
    r"(?:python|pypy|bash|sh|dash|zsh|ksh|node|ruby|perl|php|Rscript|julia|lua)[\d.]*"
)
# Words before the program that leave it the program (`env X=1 python …`, `nohup …`).
_WRAPPERS = frozenset({"env", "exec", "nohup", "time", "command"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*", re.DOTALL)
# Options that take the next word as their value (python's -W/-X, the shells' -o/-O).
_WITH_VALUE = frozenset({"-W", "-X", "-o", "-O"})
# Options after which the program runs inline code or a module, not a file: `-c` (python,
# the shells, also `-lc`), `-m` (python), `-e` (node, perl, ruby), `-p` (node), `-` (stdin).
_INLINE_CODE = re.compile(r"-[A-Za-z]*[cme]|-p|--eval|--print|-")
_OPERATOR_CHARS = frozenset("<>&|;()")
_UNKNOWABLE = re.compile(r"[$`~*?\[{\\]")


def named_files(command: str) -> list[str]:
    """The relative paths `command` runs as a program or script, in order, once each."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: the shell will say so itself
        return []
    found: list[str] = []
    for words in _simple_commands(tokens):
        if words and words[0] == "cd":
            break
        for name in _runs(words):
            if _checkable(name) and name not in found:
                found.append(name)
    return found


def missing_files(command: str, workdir: Path) -> list[str]:
    """The files `command` runs that are not in `workdir` (blocking; nothing when `workdir`
    itself is not a directory: the round says so)."""
    if not workdir.is_dir():
        return []
    return [name for name in named_files(command) if not os.path.lexists(workdir / name)]


def _simple_commands(tokens: list[str]) -> Iterator[list[str]]:
    """The words of each simple command between `&&`, `||`, `;`, `|`, `&` and parentheses,
    without redirections and their targets."""
    words: list[str] = []
    target = False
    for token in tokens:
        if target:
            target = False
            continue
        if token and set(token) <= _OPERATOR_CHARS:
            if "<" in token or ">" in token:
                target = True  # `> log`, `2>&1`: the next word is not an argument
                continue
            yield words
            words = []
            continue
        words.append(token)
    yield words


def _runs(words: list[str]) -> list[str]:
    """The program of one simple command when it is a path, and the script an interpreter
    runs."""
    rest = list(words)
    while rest and (rest[0] in _WRAPPERS or _ASSIGNMENT.fullmatch(rest[0])):
        rest.pop(0)
        while rest and rest[0].startswith("-") and rest[0] != "-":  # `env -i`, `time -p`
            rest.pop(0)
    if not rest:
        return []
    program, args = rest[0], rest[1:]
    runs = [program] if "/" in program else []
    if _INTERPRETER.fullmatch(PurePosixPath(program).name):
        script = _script(args)
        if script is not None:
            runs.append(script)
    return runs


def _script(args: list[str]) -> str | None:
    """An interpreter's script argument, if it runs one."""
    at = 0
    while at < len(args):
        word = args[at]
        if word == "--":
            return args[at + 1] if at + 1 < len(args) else None
        if _INLINE_CODE.fullmatch(word):
            return None
        if word.startswith("-"):
            at += 2 if word in _WITH_VALUE else 1
            continue
        return word
    return None


def _checkable(name: str) -> bool:
    """A relative path the words fully determine, inside the working directory."""
    path = PurePosixPath(name)
    return (
        bool(name)
        and not path.is_absolute()
        and ".." not in path.parts
        and not _UNKNOWABLE.search(name)
    )
