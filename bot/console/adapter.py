"""Console adapter: each input line is a message from the local user; replies print.

A plan (lines in plan syntax) is collected until `confirm`, a blank line or a non-plan line
closes it, so whether approval is asked never depends on how fast the lines arrive.

How replies look (Markdown rendered on a terminal, plain text in a pipe, one block per
message, status edits in place) is `bot.console.screen`.

Replies that cannot be written because the reader went away (`raven-bot chat | head`) are
recorded as delivered to nobody (message id `console-unread-N`): a later console session does
not replay them, since the reader that left chose not to read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import itertools
import logging
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from agents.plan_syntax import is_plan_line, parse_plan
from bot.channel import ChannelFeatures, InboundMessage, Inbox, Ingress, OutboundMessage
from bot.console.screen import Screen
from core.files import atomic_write
from core.ids import ConversationRef
from host.conversation.service import TurnOutcome, control_word
from host.runtime.messages import MAX_INBOUND_CHARS
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

CONSOLE_WORKSPACE = "local"
CONSOLE_CHANNEL = "console"
# The thread of a console that never typed `new` (and of every console before `new` existed).
CONSOLE_THREAD = "main"
# In RAVEN_HOME: the thread id of the active console conversation.
CONSOLE_STATE_FILE = "console-conversation"
PLAN_HINT = "(plan: add lines, `confirm` or a blank line to submit)"
USER_PROMPT = "you> "
PLAN_PROMPT = "plan> "
# Prompt ids are shown by their start; a typed answer may name a prompt by any start of
# six characters or more (`host.prompts.broker`).
SHOWN_ID_CHARS = 8
_NEW = re.compile(r"^\s*new\s*[.!]?\s*$", re.IGNORECASE)
_THREAD = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class _Line:
    """One input line, decoded; `replaced` when invalid UTF-8 bytes were replaced."""

    text: str
    replaced: bool = False


class ConsoleThread:
    """The active console conversation, kept in a file so a restart continues it until `new`."""

    def __init__(self, path: Path | None) -> None:
        self._path = path

    def load(self) -> str:
        """The saved thread id, or the default one when nothing (valid) is saved."""
        if self._path is None:
            return CONSOLE_THREAD
        try:
            saved = self._path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return CONSOLE_THREAD
        except (OSError, UnicodeDecodeError) as exc:
            log.warning(
                "cannot read %s (%s); using conversation %s", self._path, exc, label(CONSOLE_THREAD)
            )
            return CONSOLE_THREAD
        if not _THREAD.match(saved):
            log.warning("ignoring %s: %r is not a console thread id", self._path, saved[:40])
            return CONSOLE_THREAD
        return saved

    def save(self, thread: str) -> None:
        """Remember `thread` for the next start (a failure only costs that memory)."""
        if self._path is None:
            return
        try:
            atomic_write(self._path, thread + "\n")
        except OSError as exc:
            log.warning("cannot save the console conversation to %s: %s", self._path, exc)


def label(thread: str) -> str:
    """How a console conversation is named to the user: `console-1` for the first one (its
    thread id is `main`, from before `new` existed), then `console-2`, …"""
    return f"console-{1 if thread == CONSOLE_THREAD else thread}"


def next_thread(thread: str) -> str:
    """The thread id after `thread` (`main` counts as 1)."""
    return str(int(thread) + 1) if thread.isdigit() else "2"


class ConsoleAdapter:
    """A terminal chat: works interactively and with piped stdin (exits at end of input)."""

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str | None = None,
        state_file: Path | None = None,
    ) -> None:
        self._inbox: Inbox | None = None
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._user = user or _local_user()
        self._ids = itertools.count(1)
        self._closed = asyncio.Event()
        self._lines: asyncio.Queue[_Line | None] | None = None
        self._read: asyncio.Future[_Line | None] | None = None
        self._eof = False
        self._state = ConsoleThread(state_file)
        self._thread = self._state.load()
        self._used: list[ConversationRef] = []
        self._screen = Screen(self._stdout, on_gone=self._reader_gone)
        # Prompts shown and not closed yet, and whether one was shown since a piped line was
        # sent (see `_settle`).
        self._open: dict[str, Prompt] = {}
        self._asked = asyncio.Event()

    @property
    def platform(self) -> str:
        """Conversation keys start with `console`."""
        return "console"

    @property
    def features(self) -> ChannelFeatures:
        """A terminal has none of the rich features: prompts are numbered, edits reprinted."""
        return ChannelFeatures()

    @property
    def conversation(self) -> ConversationRef:
        """The active console conversation (changed by typing `new`)."""
        return ConversationRef("console", CONSOLE_WORKSPACE, CONSOLE_CHANNEL, self._thread)

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Print a reply; see the module docstring for a reader that went away."""
        n = next(self._ids)
        if not self._screen.say(message.text, key=f"console-{n}"):
            return f"console-unread-{n}"
        return f"console-{n}"

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """A new version of a status message: replaced in place on a terminal while nothing
        came after it, else printed marked as an update."""
        self._screen.update(message_id, message.text)

    async def show_prompt(self, prompt: Prompt) -> str:
        """Render a prompt as numbered choices; a typed number or option answers it. The
        question is shown as Markdown (a command in it is a code block, shown as is); the
        options are shown as plain text."""
        expires = time.strftime("%H:%M UTC", time.gmtime(prompt.expires_at))
        about = f"prompt {prompt.id[:SHOWN_ID_CHARS]}, expires {expires}"
        if prompt.options:
            footer = [
                "   ".join(f"{i}) {o}" for i, o in enumerate(prompt.options, 1)),
                f"Reply with a number or an option ({about}).",
            ]
        else:
            footer = [f"Reply with your answer ({about})."]
        self._open[prompt.id] = prompt
        self._asked.set()
        self._screen.say(f"❓ [{prompt.kind.replace('_', ' ')}] {prompt.question}", footer=footer)
        return f"console-prompt-{prompt.id}"

    async def close_prompt(self, prompt: Prompt) -> None:
        """Show how a prompt ended when nobody answered it. An answer was typed here, and the
        reply to it already names the prompt and the answer, so it is not said twice."""
        self._open.pop(prompt.id, None)
        if prompt.state == "answered":
            return
        self._screen.say(f"Prompt `{prompt.id[:SHOWN_ID_CHARS]}` {prompt.state}.")

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Consoles have one user: print it marked as private."""
        self._screen.say(text, label=f"raven (only {user_id})> ")

    async def serve(self, ingress: Ingress) -> None:
        """Read lines until end of input or close, then wait for the turns they started.

        Lines are accepted as they arrive (so `stop` reaches a running turn); turns in one
        console conversation still run in order, so replies print in order. Console prompts
        are answered by typing, so `ingress.prompts` is not needed here.
        """
        self._inbox = ingress.inbox
        interactive = self._stdin.isatty()
        self._used.append(self.conversation)
        self._screen.say(f"conversation {label(self._thread)} (type `new` for a fresh one)")
        pending: list[asyncio.Future[TurnOutcome]] = []
        pushed: _Line | None = None
        while not self._closed.is_set():
            if interactive and pushed is None:
                self._screen.prompt(USER_PROMPT)
            line = pushed if pushed is not None else await self._readline(interactive)
            pushed = None
            if line is None:
                break
            text, replaced = line.text.strip(), line.replaced
            if is_plan_line(text):
                # A plan is several lines (one per node): read them as one message.
                text, replaced, pushed = await self._plan_block(line, interactive)
            accepted = await self._submit(text, replaced)
            if accepted is not None:
                pending.append(accepted)
            if not interactive:
                # A script's lines are sequential: the next one (e.g. a typed answer to the
                # prompt this turn or its run shows) must see this line's effects.
                if accepted is not None:
                    await asyncio.wait({accepted})
                await self._settle(self.conversation)
        await self._finish(pending)

    async def _submit(self, text: str, replaced: bool) -> asyncio.Future[TurnOutcome] | None:
        """Send one typed message (or handle `new`, or refuse it with the reason)."""
        assert self._inbox is not None
        if not text or self._closed.is_set():
            return None
        if _NEW.match(text):
            await self._start_new()
            return None
        if len(text) > MAX_INBOUND_CHARS:
            self._screen.say(
                f"⚠️ That message is {len(text):,} characters; the limit is "
                f"{MAX_INBOUND_CHARS:,}. Nothing was sent: split it into shorter messages."
            )
            return None
        if replaced:
            self._screen.say(
                "⚠️ That line had bytes that are not valid UTF-8; they were replaced "
                "with � before sending."
            )
        accepted = await self._inbox.accept(self._message(text))
        if control_word(text) == "help":
            self._screen.say(
                f"In the console, `new` starts a fresh conversation (this one is "
                f"{label(self._thread)}; a restart continues it)."
            )
        return accepted

    async def _finish(self, pending: list[asyncio.Future[TurnOutcome]]) -> None:
        """Wait for the turns this console started; at end of input, for their runs too."""
        assert self._inbox is not None
        for turn in pending:
            try:
                await turn
            except asyncio.CancelledError:
                if not turn.cancelled():
                    raise
                # `stop` cancelled this turn and said so; nothing more to report.
            except Exception as exc:
                log.debug("turn failed (already reported to the user): %s", exc)
        if self._closed.is_set():
            return
        # End of input: let background runs and their reports finish before exiting, unless
        # they wait for an answer that no more input can give.
        for conv in self._used:
            await self._settle(conv)
        if self._open and not self._closed.is_set():
            ids = ", ".join(f"`{p[:SHOWN_ID_CHARS]}`" for p in self._open)
            self._screen.say(
                f"Input ended with a question unanswered (prompt {ids}): it stays open for "
                "the next console session; what was waiting for it stops now."
            )

    async def _settle(self, conv: ConversationRef) -> None:
        """Piped input: wait until what the lines so far started in `conv` is done (turns,
        runs, their reports) or a question is open, which the next line may answer. Without
        this, an answer could arrive before its question, or the end of input could wait
        for an answer that never comes."""
        assert self._inbox is not None
        self._asked.clear()
        if self._open:
            return
        waits = [
            asyncio.ensure_future(self._inbox.quiesce(conv)),
            asyncio.ensure_future(self._asked.wait()),
            asyncio.ensure_future(self._closed.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _start_new(self) -> None:
        assert self._inbox is not None
        previous = self._thread
        thread = next_thread(previous)
        # Skip threads an earlier console already used (e.g. after the state file was lost).
        while await self._inbox.knows(self._ref(thread)):
            thread = next_thread(thread)
        self._thread = thread
        self._state.save(thread)
        self._used.append(self.conversation)
        self._screen.say(
            f"conversation {label(thread)} started; {label(previous)} keeps its history "
            "and anything still running there."
        )

    async def _plan_block(self, first: _Line, interactive: bool) -> tuple[str, bool, _Line | None]:
        """Collect a plan: until `confirm` (kept), a blank line, a non-plan line (returned as
        the next line) or end of input. Returns the text, whether bytes were replaced, and
        the next line."""
        lines = [first.text.strip()]
        replaced = first.replaced
        has_node = not _is_confirm(lines[0])
        if interactive:
            self._screen.say(PLAN_HINT)
        while True:
            if interactive:
                self._screen.prompt(PLAN_PROMPT)
            line = await self._readline(interactive)
            if line is None:
                return "\n".join(lines), replaced, None
            text = line.text.strip()
            if not text:
                return "\n".join(lines), replaced, None
            if not is_plan_line(text):
                return "\n".join(lines), replaced, line
            lines.append(text)
            replaced = replaced or line.replaced
            if _is_confirm(text):
                if has_node:
                    return "\n".join(lines), replaced, None
            else:
                has_node = True

    def _ref(self, thread: str) -> ConversationRef:
        return ConversationRef("console", CONSOLE_WORKSPACE, CONSOLE_CHANNEL, thread)

    def _message(self, text: str) -> InboundMessage:
        event_id = uuid.uuid4().hex
        return InboundMessage(
            platform="console",
            workspace=CONSOLE_WORKSPACE,
            channel=CONSOLE_CHANNEL,
            thread=self._thread,
            message_id=event_id,
            author_id=self._user,
            author_name=self._user,
            text=text,
            event_id=event_id,
        )

    async def _readline(self, interactive: bool = False) -> _Line | None:
        line = await self._next_line()
        if interactive and line is None:
            # Ctrl-D does not end the prompt's line (Enter was noted as the line arrived).
            self._screen.end_input()
        return line

    async def _next_line(self) -> _Line | None:
        if self._lines is None:
            self._lines = asyncio.Queue()
            loop = asyncio.get_running_loop()
            # A daemon thread, not the default executor: a read blocked on a terminal must not
            # keep the process alive after shutdown.
            threading.Thread(
                target=self._pump, args=(loop, self._lines), name="console-stdin", daemon=True
            ).start()
        if self._eof:
            return None
        # The read survives a caller's cancellation and is reused, so no line is ever dropped.
        if self._read is None:
            self._read = asyncio.ensure_future(self._lines.get())
        read = self._read
        closed = asyncio.ensure_future(self._closed.wait())
        waiting: set[asyncio.Future[Any]] = {read, closed}
        try:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if read not in done:
            return None
        self._read = None
        line = read.result()
        if line is None:
            self._eof = True
        return line

    def _pump(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[_Line | None]) -> None:
        # Bytes, not text: a line that is not UTF-8 must not end the input (a decode error
        # inside a text reader would look like end of input).
        raw: BinaryIO | None = getattr(self._stdin, "buffer", None)
        while True:
            try:
                line = _decode(raw.readline()) if raw is not None else _fix(self._stdin.readline())
            except (OSError, ValueError):
                line = None
            try:
                loop.call_soon_threadsafe(self._arrived, lines, line)
            except RuntimeError:
                return  # the loop is gone: the process is exiting
            if line is None:
                return

    def _arrived(self, lines: asyncio.Queue[_Line | None], line: _Line | None) -> None:
        """A line read: on a terminal, Enter moved the cursor below the prompt as it was
        pressed, so the screen learns it now, not when the line is taken from the queue (a
        reply shown in between would take the prompt's line without its blank line)."""
        if line is not None and self._stdin.isatty():
            self._screen.entered()
        lines.put_nowait(line)

    async def close(self) -> None:
        """Stop reading input."""
        self._closed.set()
        if self._read is not None:
            self._read.cancel()

    def _reader_gone(self) -> None:
        """Output cannot be written any more (the screen stops writing): stop input too."""
        log.info("console output closed (the reader went away); stopping input")
        # Point stdout at /dev/null so the interpreter's final flush does not print a
        # BrokenPipeError traceback (the recipe in the Python `signal` docs).
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stdout.fileno())
            os.close(devnull)
        self._closed.set()
        if self._read is not None:
            self._read.cancel()


def _is_confirm(line: str) -> bool:
    return is_plan_line(line) and parse_plan(line) is None


def _decode(raw: bytes) -> _Line | None:
    if not raw:
        return None
    try:
        return _Line(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return _Line(raw.decode("utf-8", errors="replace"), replaced=True)


def _fix(text: str) -> _Line | None:
    if not text:
        return None
    # Text streams opened with surrogateescape carry undecodable bytes as lone surrogates.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", errors="replace")
        return _Line(raw.decode("utf-8", errors="replace"), replaced=True)
    return _Line(text)


def _local_user() -> str:
    try:
        return getpass.getuser() or "local"
    except (KeyError, OSError):
        return "local"
