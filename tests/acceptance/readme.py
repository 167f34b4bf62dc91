"""The README's runnable examples, as text: every fenced code block and every inline
`raven-bot …` command (also `.venv/bin/raven-bot …` and a bare subcommand line such as
`memory show --user ID`). The coverage check compares them with what the acceptance tests
declare they run (each test module's `README_EXAMPLES`)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"

_FENCE = re.compile(r"^```[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"(?<!`)`(?P<code>[^`\n]+)`(?!`)")
# The `raven-bot` subcommands that have subcommands of their own: an inline span starting with
# one of them and going on (`skills list`, `memory show --user ID`) is a command line too.
GROUPS = ("graph", "runs", "campaigns", "schedules", "memory", "skills")
_COMMAND = re.compile(rf"^(?:(?:\.venv/bin/)?raven-bot\b.*|(?:{'|'.join(GROUPS)}) [a-z-].*)$")
# What a person types in a thread: a plan line (`s1: shell: …`; `id: agent: task` is the
# syntax, not an example) or a `campaign:`, `schedule:` or `watch:` line.
_PLAN_LINE = re.compile(r"^[a-z]\w*: (?!agent:)[a-z][\w-]*: \S")
_CHAT_BLOCK = re.compile(rf"{_PLAN_LINE.pattern}|^(?:campaign|schedule|watch): \S")


def readme_text() -> str:
    """The README as it is now."""
    return README.read_text(encoding="utf-8")


def fenced_blocks(text: str) -> list[str]:
    """The body of every fenced code block, without the fences and trailing blank lines."""
    return [m["body"].rstrip("\n") for m in _FENCE.finditer(text)]


def inline_spans(text: str) -> list[str]:
    """Every inline code span outside fenced blocks, once each, in README order."""
    outside = _FENCE.sub("", text)
    return list(dict.fromkeys(m["code"].strip() for m in _INLINE.finditer(outside)))


def inline_commands(text: str) -> list[str]:
    """The inline code spans that are `raven-bot` command lines."""
    return [code for code in inline_spans(text) if _COMMAND.match(code)]


def examples(text: str | None = None) -> list[str]:
    """Everything the README shows as runnable: fenced blocks, then inline commands."""
    text = readme_text() if text is None else text
    return [*fenced_blocks(text), *inline_commands(text)]


def chat_examples(text: str | None = None) -> list[str]:
    """What the README shows typed into a thread, in README order: fenced blocks of plans and
    `campaign:`/`schedule:`/`watch:` lines, and plan lines written inline (the first shell
    example), each once."""
    text = readme_text() if text is None else text
    found = [(m.start(), m["body"].rstrip("\n")) for m in _FENCE.finditer(text)]
    found = [(at, body) for at, body in found if _CHAT_BLOCK.match(body)]
    # Blank the fenced blocks out, keeping offsets, to find the inline spans between them.
    outside = _FENCE.sub(lambda m: " " * len(m[0]), text)
    found += [(m.start(), m["code"].strip()) for m in _INLINE.finditer(outside)]
    ordered = [body for _, body in sorted(found) if _CHAT_BLOCK.match(body)]
    blocks = fenced_blocks(text)
    wanted = [b for b in ordered if b in blocks or ("\n" not in b and _PLAN_LINE.match(b))]
    return list(dict.fromkeys(wanted))
