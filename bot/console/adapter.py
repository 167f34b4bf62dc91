"""Console adapter: each input line is a message from the local user; replies print."""

from __future__ import annotations

import asyncio
import getpass
import itertools
import logging
import sys
import threading
import time
import uuid
from typing import Any, TextIO

from agents.plan_syntax import is_plan_line
from bot.channel import InboundMessage, Inbox, OutboundMessage
from host.conversations import TurnOutcome
from host.prompt_model import Prompt
from memory.conversation_log import ConversationRef

log = logging.getLogger(__name__)

CONSOLE_WORKSPACE = "local"
CONSOLE_CHANNEL = "console"
CONSOLE_THREAD = "main"
# How long a plan block waits for its next line (pasted and piped lines arrive together).
PLAN_LINE_WAIT = 0.5


class ConsoleAdapter:
    """A terminal chat: works interactively and with piped stdin (exits at end of input)."""

    def __init__(
        self,
        inbox: Inbox | None = None,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str | None = None,
    ) -> None:
        self._inbox = inbox
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._user = user or _local_user()
        self._ids = itertools.count(1)
        self._closed = asyncio.Event()
        self._lines: asyncio.Queue[str | None] | None = None
        self._read: asyncio.Future[str | None] | None = None
        self._eof = False

    @property
    def platform(self) -> str:
        """Conversation keys start with `console`."""
        return "console"

    def bind(self, inbox: Inbox, prompts: object | None = None) -> None:
        """Attach the conversation service (assembly root, before `serve`); console prompts
        are answered by typing, so the broker is not needed here."""
        self._inbox = inbox

    @property
    def conversation(self) -> ConversationRef:
        """The single console conversation."""
        return ConversationRef("console", CONSOLE_WORKSPACE, CONSOLE_CHANNEL, CONSOLE_THREAD)

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Print a reply."""
        self._write(f"raven> {message.text}\n")
        return f"console-{next(self._ids)}"

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Consoles cannot edit: print the new version marked as an update."""
        self._write(f"raven (update {message_id})> {message.text}\n")

    async def show_prompt(self, prompt: Prompt) -> str:
        """Render a prompt as numbered choices; a typed number or option answers it."""
        expires = time.strftime("%H:%M UTC", time.gmtime(prompt.expires_at))
        lines = [f"raven> ❓ [{prompt.kind.replace('_', ' ')}] {prompt.question}"]
        if prompt.options:
            lines.append(
                "       " + "   ".join(f"{i}) {o}" for i, o in enumerate(prompt.options, 1))
            )
            lines.append(f"       Reply with a number or an option (expires {expires}).")
        else:
            lines.append(f"       Reply with your answer (expires {expires}).")
        self._write("\n".join(lines) + "\n")
        return f"console-prompt-{prompt.id}"

    async def close_prompt(self, prompt: Prompt) -> None:
        """Show how a prompt ended."""
        if prompt.state == "answered":
            outcome = f"answered by {prompt.answered_by}: {prompt.answer}"
        else:
            outcome = prompt.state
        self._write(f"raven> ✔ prompt `{prompt.id}` {outcome}\n")

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Consoles have one user: print it marked as private."""
        self._write(f"raven (only {user_id})> {text}\n")

    async def serve(self) -> None:
        """Read lines until end of input or close, then wait for the turns they started.

        Lines are accepted as they arrive (so `stop` reaches a running turn); turns in the
        one console conversation still run in order, so replies print in order.
        """
        if self._inbox is None:
            raise RuntimeError("ConsoleAdapter.serve() called before bind()")
        interactive = self._stdin.isatty()
        pending: list[asyncio.Future[TurnOutcome]] = []
        pushed: str | None = None
        while not self._closed.is_set():
            if interactive and pushed is None:
                self._write("you> ")
            line = pushed if pushed is not None else await self._readline()
            pushed = None
            if line is None:
                break
            text = line.strip()
            if is_plan_line(text):
                # A plan is several lines (one per node): read them as one message.
                text, pushed = await self._plan_block(text)
            if text:
                accepted = await self._inbox.accept(self._message(text))
                if accepted is not None:
                    pending.append(accepted)
                    if not interactive:
                        # A script's lines are sequential: the next one (e.g. a typed answer
                        # to the prompt this turn shows) must see this turn's effects.
                        await asyncio.wait({accepted})
        for turn in pending:
            try:
                await turn
            except asyncio.CancelledError:
                if not turn.cancelled():
                    raise
                # `stop` cancelled this turn and said so; nothing more to report.
            except Exception as exc:
                log.debug("turn failed (already reported to the user): %s", exc)
        if not self._closed.is_set():
            # End of input: let background runs and their reports finish before exiting.
            await self._inbox.quiesce(self.conversation)

    async def _plan_block(self, first: str) -> tuple[str, str | None]:
        """Collect the plan lines that follow `first`; return the block and the next line."""
        lines = [first]
        while True:
            try:
                async with asyncio.timeout(PLAN_LINE_WAIT):
                    line = await self._readline()
            except TimeoutError:
                return "\n".join(lines), None
            if line is None:
                return "\n".join(lines), None
            if not is_plan_line(line.strip()):
                return "\n".join(lines), line
            lines.append(line.strip())

    def _message(self, text: str) -> InboundMessage:
        event_id = uuid.uuid4().hex
        return InboundMessage(
            platform="console",
            workspace=CONSOLE_WORKSPACE,
            channel=CONSOLE_CHANNEL,
            thread=CONSOLE_THREAD,
            message_id=event_id,
            author_id=self._user,
            author_name=self._user,
            text=text,
            event_id=event_id,
        )

    async def _readline(self) -> str | None:
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
        # The read survives a caller's timeout and is reused, so no line is ever dropped.
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

    def _pump(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
        while True:
            try:
                line = self._stdin.readline()
            except (OSError, ValueError):
                line = ""
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line or None)
            except RuntimeError:
                return  # the loop is gone: the process is exiting
            if not line:
                return

    async def close(self) -> None:
        """Stop reading input."""
        self._closed.set()
        if self._read is not None:
            self._read.cancel()

    def _write(self, text: str) -> None:
        self._stdout.write(text)
        self._stdout.flush()


def _local_user() -> str:
    try:
        return getpass.getuser() or "local"
    except (KeyError, OSError):
        return "local"
