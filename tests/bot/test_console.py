"""The console as a person uses it: a real `raven-bot chat` on a pty, lines typed one at a
time (waiting for the bot between lines), plus piped input and a reader that goes away."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run

WITHIN = 60.0  # hang guard for each wait, not a timing assertion
_STYLE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class PtyChat:
    """`raven-bot chat` with its terminal on a pty: type lines, wait for output."""

    def __init__(self, env: dict[str, str], errors: Path | None) -> None:
        """`errors`: where stderr goes (None: the terminal too, as for a person)."""
        self._master, slave = pty.openpty()
        self._errors = errors.open("wb") if errors is not None else None
        self.proc = subprocess.Popen(
            [RAVEN, "chat"],
            stdin=slave,
            stdout=slave,
            stderr=self._errors if self._errors is not None else slave,
            env=env,
        )
        os.close(slave)
        self._raw = ""
        self._out = ""  # what the terminal shows, without styles and line erasing
        self._seen = 0  # output before this offset was matched by an earlier `expect`

    def type(self, line: str | bytes) -> None:
        """Type one line and press Enter."""
        data = line.encode() if isinstance(line, str) else line
        os.write(self._master, data + b"\r")

    def expect(self, text: str, within: float = WITHIN) -> str:
        """Wait until `text` appears in output not matched before; return the new output."""
        deadline = time.monotonic() + within
        while True:
            found = self._out.find(text, self._seen)
            if found >= 0:
                new = self._out[self._seen : found + len(text)]
                self._seen = found + len(text)
                return new
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"never saw {text!r}; output:\n{self._out[self._seen :]}")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self._raw += chunk.decode("utf-8", errors="replace")
        # Replies are rendered (styled, wrapped at 80 columns and indented under `raven> `):
        # text is matched without styles, any run of white space as one space.
        self._out = re.sub(r"\s+", " ", _STYLE.sub("", self._raw))
        return bool(chunk)

    @property
    def raw(self) -> str:
        """Everything the terminal was sent, as sent."""
        return self._raw

    def drain(self) -> None:
        """Read what is already waiting on the terminal."""
        while self._read(0):
            pass

    def end(self) -> int:
        """Type Ctrl-D (end of input) and wait for the process to exit."""
        os.write(self._master, b"\x04")
        # Drain output while waiting so the child never blocks on a full terminal.
        deadline = time.monotonic() + WITHIN
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        return self.proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the child if it is still running and release the terminal."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._master)
        if self._errors is not None:
            self._errors.close()


@pytest.fixture
def chat(isolated_env: Path, tmp_path: Path) -> Iterator[PtyChat]:
    """A console chat on a pty in the isolated RAVEN_HOME."""
    session = PtyChat(_env(isolated_env), tmp_path / "stderr.log")
    yield session
    session.close()


def test_pty_start_names_the_conversation_and_help_lists_new(chat: PtyChat) -> None:
    chat.expect("conversation console-1 (type new for a fresh one)")
    chat.expect("you> ")
    chat.type("help")
    chat.expect("help shows this message.")
    chat.expect("new starts a fresh conversation")
    assert chat.end() == 0


def test_pty_oversized_line_is_refused_and_the_session_continues(chat: PtyChat) -> None:
    chat.expect("you> ")
    # A terminal's line buffer is limited (4 KiB on Linux), so a huge line is pasted the way
    # a terminal delivers it to a program: there is no such limit for `chat < file`. The
    # limit is checked on the message, so a long plan line shows it just as well.
    chat.type("r1: research: " + "x" * 3000)
    chat.expect("plan> ")
    for _ in range(13):
        chat.type("r1: research: " + "y" * 3000)
        chat.expect("plan> ")
    chat.type("")
    refused = chat.expect("Nothing was sent")
    assert "the limit is 40,000" in refused
    chat.type("hello")
    chat.expect("offline mode")
    assert chat.end() == 0


def test_pty_invalid_utf8_is_replaced_and_the_session_continues(chat: PtyChat) -> None:
    chat.expect("you> ")
    chat.type(b"caf\xe9 \xff")
    chat.expect("not valid UTF-8; they were replaced")
    chat.expect("offline mode")
    chat.type("status")
    chat.expect("Status:")
    assert chat.end() == 0


def test_pty_plan_typed_line_by_line_asks_for_approval(chat: PtyChat, isolated_env: Path) -> None:
    chat.expect("you> ")
    chat.type("r1: research: find X")
    chat.expect("(plan: add lines, confirm or a blank line to submit)")
    chat.expect("plan> ")
    chat.type("c1: code: build Y [after r1]")
    chat.expect("plan> ")
    chat.type("confirm")
    asked = chat.expect("Reply with a number or an option")
    assert "[approval] Run this graph?" in asked
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM graph_runs").fetchone() == (0,)
    chat.type("1")
    chat.expect("Approved by")
    chat.expect("Nodes:")
    assert chat.end() == 0


def test_pty_plan_closed_by_a_blank_line_runs_without_asking(chat: PtyChat) -> None:
    chat.expect("you> ")
    chat.type("r1: research: find X")
    chat.expect("plan> ")
    chat.type("")
    report = chat.expect("Nodes:")
    assert "Run this graph?" not in report
    assert chat.end() == 0


def test_pty_stop_and_status_leave_the_bot_working(chat: PtyChat) -> None:
    chat.expect("you> ")
    chat.type("hello")
    chat.expect("offline mode")
    chat.type("stop")
    chat.expect("Stopped:")
    chat.type("status")
    chat.expect("Status:")
    chat.type("hello again")
    chat.expect("offline mode")
    assert chat.end() == 0


@pytest.mark.slow
async def test_piped_oversized_and_non_utf8_lines_do_not_end_the_session(
    isolated_env: Path,
) -> None:
    lines = b"x" * 40_001 + b"\n" + b"caf\xe9 \xff\n" + b"status\n"
    code, out, err = await _run("chat", stdin=lines, env=_env(isolated_env))
    assert code == 0, err
    assert "That message is 40,001 characters; the limit is 40,000" in out
    assert "not valid UTF-8; they were replaced" in out
    assert "offline mode" in out
    assert "Status:" in out
    assert "Traceback" not in err


@pytest.mark.slow
async def test_piped_plan_with_confirm_asks_then_reports(isolated_env: Path) -> None:
    plan = b"r1: research: find X\nc1: code: build Y after r1\nconfirm\n1\n"
    code, out, err = await _run("chat", stdin=plan, env=_env(isolated_env))
    assert code == 0, err
    assert "Run this graph?" in out
    assert out.index("Run this graph?") < out.index("Approved by") < out.index("Nodes:")


@pytest.mark.slow
async def test_new_starts_a_fresh_conversation_that_a_restart_continues(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    plan = b"r1: research: find X\n\n"
    code, out, err = await _run("chat", stdin=plan, env=env)
    assert code == 0, err
    # In a fresh conversation the same node id is a fresh node again (the README's example).
    code, out, _ = await _run(
        "chat", stdin=b"new\n" + plan + b"r2: research: ask\nconfirm\n", env=env
    )
    assert code == 0
    assert "conversation console-2 started" in out
    assert out.count("Nodes:") == 1
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        runs = conn.execute("SELECT conversation_id FROM graph_runs ORDER BY rowid").fetchall()
    assert [r[0].rsplit(":", 1)[1] for r in runs] == ["main", "2"]
    # A restart continues console-2: its pending approval is answered by typing.
    code, out, err = await _run("chat", stdin=b"1\n", env=env)
    assert code == 0, err
    assert "conversation console-2 (type `new` for a fresh one)" in out
    assert "Approved by" in out


@pytest.mark.slow
def test_reader_going_away_exits_quietly_and_is_not_replayed(
    isolated_env: Path, tmp_path: Path
) -> None:
    errors = tmp_path / "stderr.log"
    with errors.open("wb") as err:
        proc = subprocess.Popen(
            [RAVEN, "chat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=_env(isolated_env),
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"help\n")
        proc.stdin.flush()
        # Like `| head -1`: read the first line, then stop reading.
        ready, _, _ = select.select([proc.stdout], [], [], WITHIN)
        assert ready, "no output"
        assert proc.stdout.readline().startswith(b"raven> ")
        proc.stdout.close()
        # A reply to this can only be written after the reader went away.
        proc.stdin.write(b"hello\n")
        proc.stdin.close()
        code = proc.wait(timeout=WITHIN)
    logged = errors.read_text()
    assert code == 0, logged
    assert "Traceback" not in logged and "BrokenPipe" not in logged
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        unsent = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE direction = 'out' AND delivery != 'sent'"
        ).fetchone()
    assert unsent == (0,)
    # The next session does not replay the replies nobody could read.
    result = subprocess.run(
        [RAVEN, "chat"],
        check=False,
        input=b"status\n",
        capture_output=True,
        env=_env(isolated_env),
        timeout=WITHIN,
    )
    assert result.returncode == 0
    assert b"offline mode" not in result.stdout
    assert b"`help` shows this message" not in result.stdout
    assert b"Status:" in result.stdout


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_pty_readme_offline_example_asks_then_runs_shell_and_reports(chat: PtyChat) -> None:
    # The README's "In a thread" example, typed as a new user would, one line at a time.
    chat.expect("you> ")
    chat.type('s1: shell: echo "hello from the sandbox" && uname -a')
    chat.expect("plan> ")
    chat.type("confirm")
    asked = chat.expect("Reply with a number or an option")
    assert "Run this graph?" in asked
    chat.type("1")
    # The shell command is approved on its own, showing the exact command.
    command = chat.expect("Reply with a number or an option")
    assert 'echo "hello from the sandbox" && uname -a' in command
    chat.type("1")
    report = chat.expect("Nodes:")
    output = chat.expect("hello from the sandbox")
    assert "completed" in report and "Output of s1" in output
    assert chat.end() == 0


def test_pty_prompt_shows_and_typing_is_kept_before_the_runtime_is_ready(
    isolated_env: Path, tmp_path: Path
) -> None:
    """`chat` greets before the runtime loads: with the database write-locked by another
    process, the runtime cannot be ready (its migrations wait for the lock), yet the prompt
    is shown and a line typed at it is answered once the lock is released."""
    isolated_env.mkdir(parents=True, exist_ok=True)
    holder = sqlite3.connect(isolated_env / "raven.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN IMMEDIATE")
    chat = PtyChat(_env(isolated_env), tmp_path / "stderr.log")
    try:
        chat.expect("conversation console-1 (type new for a fresh one)")
        chat.expect("you> ")
        chat.type("help")
        holder.execute("ROLLBACK")  # the runtime may load now; the line was typed before
        chat.expect("help shows this message.")
        assert chat.end() == 0
    finally:
        holder.close()
        chat.close()


def test_pty_a_start_that_fails_says_so_before_any_prompt(tmp_path: Path) -> None:
    """RAVEN_HOME is checked (and the serving lock taken in it) before the prompt shows:
    when that fails, the error is the only thing said, no prompt is left dangling, and the
    exit code says so."""
    home = tmp_path / "home-file"
    home.write_text("not a directory", encoding="utf-8")
    chat = PtyChat(_env(home), tmp_path / "stderr.log")
    try:
        assert chat.proc.wait(timeout=WITHIN) == 2
        chat.drain()
        errors = (tmp_path / "stderr.log").read_text(encoding="utf-8")
        assert "is not a directory" in errors
        assert "you> " not in chat.raw, repr(chat.raw[-40:])
    finally:
        chat.close()


def test_pty_a_warning_logged_after_the_prompt_shows_does_not_land_on_its_line(
    isolated_env: Path,
) -> None:
    """Start-up warnings come while the prompt already shows (the runtime loads after it):
    on the person's terminal, the prompt is taken off its line, the warning printed, and the
    prompt shown again below it."""
    env = _env(isolated_env)
    done = subprocess.run(
        [RAVEN, "chat"], input=b"hello\n", env=env, capture_output=True, check=True, timeout=60
    )
    assert done.stdout, done.stderr
    # As a crash leaves it: a turn recorded as running, which the next start interrupts.
    with sqlite3.connect(isolated_env / "raven.db") as db:
        db.execute("UPDATE turns SET status = 'running'")
    chat = PtyChat(env, None)
    try:
        chat.expect("were interrupted by the last shutdown")
        chat.expect("you> ")
        raw = chat.raw
        warning = raw.index("raven-bot warning")
        assert "you> raven-bot" not in raw, repr(raw[warning - 40 : warning + 20])
        assert "you> " in raw[warning:], repr(raw[warning:])
        assert chat.end() == 0
    finally:
        chat.close()
