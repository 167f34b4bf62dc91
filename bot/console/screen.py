"""The console's output: one block per message, a blank line between blocks, each starting
with its label (`raven> `); on a terminal, Markdown rendered with `rich`, the input prompt
kept on the last line and a status message edited in place while nothing came after it.

Piped output is plain text without ANSI codes (see `bot.console.markdown.plain_lines`), with
every version of an edited message printed in turn, marked as an update.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console

from bot.console.markdown import plain_lines, terminal_lines, visible_controls
from core.reader_time import drop_reader_times

LABEL = "raven> "
UPDATE_LABEL = "raven (updated status)> "
# Continuation lines on a terminal line up under the text after `raven> `.
INDENT = " " * len(LABEL)
_ERASE_LINE = "\r\x1b[2K"
_ERASE_DOWN = "\x1b[J"


@dataclass(frozen=True)
class _Shown:
    """The last block on a terminal: its key and how many screen lines it took."""

    key: str
    lines: int


class Screen:
    """Writes the console's blocks and prompts to `out` (see the module docstring)."""

    def __init__(self, out: TextIO, *, on_gone: Callable[[], None]) -> None:
        self._out = out
        self._on_gone = on_gone
        self._gone = False
        self._terminal = _isatty(out)
        # Detected once, as rich does for its own console (NO_COLOR, TERM, COLORTERM).
        self._colors = Console(file=out).color_system if self._terminal else None
        self._started = False
        self._block_last = False  # the last thing shown is a block (not a prompt or input)
        self._prompt: str | None = None  # the input prompt shown on the last line, if any
        self._prompt_gap = False  # a blank line is above the prompt
        self._last: _Shown | None = None  # the block directly above the prompt, if keyed

    @property
    def terminal(self) -> bool:
        """True when output goes to a terminal (rendered, edited in place)."""
        return self._terminal

    def say(
        self,
        text: str,
        *,
        label: str = LABEL,
        footer: Sequence[str] = (),
        key: str | None = None,
    ) -> bool:
        """Print a message (Markdown) and `footer` lines (plain text) as one block; `key`
        lets `update` replace it later. False when the reader went away."""
        lines = self._lines(text, label, footer)
        if not self._write(self._before_block() + "\n".join(lines) + "\n" + self._after_block()):
            return False
        self._started = self._block_last = True
        self._last = _Shown(key, len(lines)) if key is not None and self._terminal else None
        return True

    def update(self, key: str, text: str) -> bool:
        """A new version of the message `key`: replaces it on a terminal when it is the last
        block (and fits on the screen), else printed marked as an update."""
        last = self._last
        if last is None or last.key != key or last.lines + 2 > _rows(self._out):
            return self.say(text, label=UPDATE_LABEL, key=key)
        lines = self._lines(text, LABEL, ())
        # From the prompt's line (when shown) up over the blank line and the block.
        if self._prompt is not None:
            back = f"{_ERASE_LINE}\x1b[{last.lines + 1}A"
        else:
            back = f"\r\x1b[{last.lines}A"
        if not self._write(back + _ERASE_DOWN + "\n".join(lines) + "\n" + self._after_block()):
            return False
        self._last = _Shown(key, len(lines))
        return True

    def prompt(self, text: str) -> None:
        """Show the input prompt `text` (`you> `, `plan> `), after a blank line when a
        block came last."""
        if self._prompt == text:
            return
        if self._prompt is not None:
            before, gap = (_ERASE_LINE if self._terminal else "\n"), self._prompt_gap
        else:
            before = "\n" if self._block_last else ""
            gap = self._block_last
        if self._write(before + text):
            self._prompt, self._prompt_gap = text, gap
            self._started = True

    def aside(self, write: Callable[[], None]) -> None:
        """Run `write` (a line on another stream of this terminal, such as a warning) with
        the input prompt taken off its line and shown again below it."""
        prompt = self._prompt if self._terminal else None
        if prompt is not None:
            self._write(_ERASE_LINE)
        write()
        if prompt is not None:
            self._write(prompt)

    def entered(self) -> None:
        """The person pressed Enter: the prompt's line is theirs now, the cursor below it."""
        self._prompt = None
        self._last = None
        self._block_last = False

    def end_input(self) -> None:
        """End of input (Ctrl-D at the prompt, which does not move the cursor): end the
        prompt's line so what still comes starts below it."""
        if self._prompt is not None and self._write("\n"):
            self.entered()

    def _before_block(self) -> str:
        """The prompt erased (a terminal: the blank line above it stays as the gap) or ended
        (a pipe), and a blank line between blocks."""
        if self._prompt is not None and self._terminal:
            return _ERASE_LINE + ("" if self._prompt_gap else "\n")
        end = "\n" if self._prompt is not None else ""
        return end + ("\n" if self._started else "")

    def _after_block(self) -> str:
        """The prompt again, after a blank line, when one was shown."""
        if self._prompt is None:
            return ""
        self._prompt_gap = True
        return "\n" + self._prompt

    def _lines(self, text: str, label: str, footer: Sequence[str]) -> list[str]:
        # The console has no per-reader time: its times are the ones named in the text.
        text = drop_reader_times(text)
        extra = [visible_controls(line) for line in footer]
        if not self._terminal:
            body = plain_lines(text) + extra
            return [label + body[0], *body[1:]]
        width = max(20, _columns(self._out) - len(INDENT) - 1)
        body = terminal_lines(text, width=width, color_system=self._colors) + extra
        if len(label) != len(INDENT):
            # A longer label gets its own line, so the text still lines up under `raven> `.
            return [label.rstrip()] + [INDENT + line if line else "" for line in body]
        return [label + body[0]] + [INDENT + line if line else "" for line in body[1:]]

    def _write(self, text: str) -> bool:
        if self._gone:
            return False
        try:
            self._out.write(text)
            self._out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._gone = True
            self._on_gone()
            return False
        return True


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (ValueError, OSError):
        return False


def _columns(out: TextIO) -> int:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.get_terminal_size(out.fileno()).columns or 80
    return 80


def _rows(out: TextIO) -> int:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.get_terminal_size(out.fileno()).lines or 24
    return 24


def markdown_for(out: TextIO, text: str) -> str:
    """`text` (Markdown) as a person reads it on `out`, one block (CLI commands such as
    `runs show`): rendered for a terminal (its width and colours), else plain text."""
    if not _isatty(out):
        return "\n".join(plain_lines(text)) + "\n"
    colors = Console(file=out).color_system
    lines = terminal_lines(text, width=max(20, _columns(out) - 1), color_system=colors)
    return "\n".join(lines) + "\n"
