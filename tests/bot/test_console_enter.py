"""A reply shown right after a person pressed Enter, before the console took the line, still
starts after a blank line (on a terminal the prompt's line is theirs from the moment Enter
is pressed)."""

from __future__ import annotations

import asyncio
import os
import pty

from bot.console.adapter import USER_PROMPT, ConsoleAdapter
from tests.bot.test_console_transcript import screen_of


async def test_a_reply_between_enter_and_the_line_being_taken_keeps_its_blank_line() -> None:
    master, slave = pty.openpty()
    stdin = os.fdopen(slave, "r", closefd=False)
    stdout = os.fdopen(os.dup(slave), "w")
    adapter = ConsoleAdapter(stdin=stdin, stdout=stdout, user="ada")
    screen = adapter._screen
    try:
        screen.say("a question")
        screen.prompt(USER_PROMPT)
        # The line arrives (the reader thread hands it over) while the console is still busy:
        # the serve loop has not taken it yet when the reply is shown.
        taking = asyncio.ensure_future(adapter._readline())
        os.write(master, b"1\n")
        async with asyncio.timeout(30):  # a hang guard
            await taking
        screen.say("the reply")
        raw = b""
        while b"the reply" not in raw:
            raw += await asyncio.to_thread(os.read, master, 4096)
    finally:
        # The terminal goes away first: the reader thread's blocked read then ends (closing
        # its file while it reads would wait on the read's lock).
        os.close(master)
        await adapter.close()
        stdout.close()
        os.close(slave)
    lines = screen_of(raw.decode())
    reply = next(n for n, line in enumerate(lines) if "the reply" in line)
    assert lines[reply - 1] == "", lines
    assert lines[reply - 2] == "you> 1", lines
