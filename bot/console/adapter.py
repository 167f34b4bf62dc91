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
import getpass
import itertools
import logging
import re
import sqlite3
import time
import uuid
from pathlib import Path
from typing import TextIO

from agents.plan_syntax import continues_plan, is_confirm_line, is_plan_line
from bot.channel import ChannelFeatures, InboundMessage, Inbox, Ingress, OutboundMessage
from bot.console.stdin import Line
from bot.console.terminal import USER_PROMPT, Terminal
from bot.console.thread import label, next_thread
from core.ids import ConversationRef
from host.conversation.service import TurnOutcome, control_word
from host.prompts.waiting import is_held
from host.runtime.messages import MAX_INBOUND_CHARS, OutboundFile
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

CONSOLE_WORKSPACE = "local"
CONSOLE_CHANNEL = "console"
PLAN_HINT = "(plan: add lines, `confirm` or a blank line to submit)"
PLAN_PROMPT = "plan> "
# Prompt ids are shown by their start; a typed answer may name a prompt by any start of
# six characters or more (`host.prompts.broker`).
SHOWN_ID_CHARS = 8
_NEW = re.compile(r"^\s*new\s*[.!]?\s*$", re.IGNORECASE)


class ConsoleAdapter:
    """A terminal chat: works interactively and with piped stdin (exits at end of input)."""

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str | None = None,
        state_file: Path | None = None,
        terminal: Terminal | None = None,
    ) -> None:
        """`terminal`: one made (and maybe greeted) before the runtime; else one on
        `stdin`, `stdout` and `state_file`."""
        self._inbox: Inbox | None = None
        self._terminal = terminal or Terminal(stdin=stdin, stdout=stdout, state_file=state_file)
        self._user = user or _local_user()
        self._ids = itertools.count(1)
        self._closed = self._terminal.closed
        self._state = self._terminal.state
        self._thread = self._terminal.thread
        self._used: list[ConversationRef] = []
        self._screen = self._terminal.screen
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

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """A file the run made: its path, on one line (the console runs on the bot's host,
        so the reader can open it; printing twice after a crash does no harm)."""
        n = next(self._ids)
        self._screen.say(f"📎 {file.name}: `{file.path}`", key=f"console-{n}")
        return f"console-{n}"

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """A new version of a status message: replaced in place on a terminal while nothing
        came after it, else printed marked as an update."""
        self._screen.update(message_id, message.text)

    async def show_prompt(self, prompt: Prompt) -> str:
        """Render a prompt as numbered choices; a typed number or option answers it. The
        question is shown as Markdown (a command in it is a code block, shown as is); the
        options are shown as plain text."""
        if is_held(prompt):
            about = f"prompt {prompt.id[:SHOWN_ID_CHARS]}, held past its deadline"
        else:
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
        reply to it already names the prompt and the answer, so it is not said twice. A held
        prompt stays open: it is still answered by typing."""
        if is_held(prompt):
            self._screen.say(
                f"Prompt `{prompt.id[:SHOWN_ID_CHARS]}` expired — still waiting (held): "
                "type your answer, or `stop` to end the run."
            )
            return
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
        interactive = self._terminal.lines.interactive
        self._used.append(self.conversation)
        self._terminal.greet()
        pending: list[asyncio.Future[TurnOutcome]] = []
        pushed: Line | None = None
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
        try:
            accepted = await self._inbox.accept(self._message(text))
        except (OSError, sqlite3.Error) as exc:
            # A full disk or a lost database: this message is refused, the session goes on.
            log.info("recording a console message failed: %s", exc)
            self._screen.say(f"⚠️ That message could not be recorded ({exc}); nothing was sent.")
            return None
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

    async def _plan_block(self, first: Line, interactive: bool) -> tuple[str, bool, Line | None]:
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
            if not continues_plan(text):
                # A mistyped node line stays in the plan, which is then refused naming it.
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
            # Everything typed at the console is said to the bot.
            addressed=True,
        )

    async def _readline(self, interactive: bool = False) -> Line | None:
        line = await self._terminal.lines.next(self._closed)
        if interactive and line is None:
            # Ctrl-D does not end the prompt's line (Enter was noted as the line arrived).
            self._screen.end_input()
        return line

    async def close(self) -> None:
        """Stop reading input."""
        self._terminal.close()


def _is_confirm(line: str) -> bool:
    return is_confirm_line(line)


def _local_user() -> str:
    try:
        return getpass.getuser() or "local"
    except (KeyError, OSError):
        return "local"
