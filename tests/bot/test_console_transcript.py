"""What a person reads in the console: the real `raven-bot chat` with the product's defaults
(the MiniLM embedder loads, as for a user), on a terminal and piped. No log lines or progress
bars among the chat (logs go to RAVEN_HOME/logs/raven.log), Markdown rendered (no raw `**`),
each turn on its own lines after a blank line, short prompt ids, one notice per answer."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.console.screen import Screen
from bot.logging_setup import configure_logging
from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

WITHIN = 120.0  # hang guard for each wait (the model loads first), not a timing assertion

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d .* (DEBUG|INFO) ", re.MULTILINE)
_PROGRESS = re.compile(r"Loading weights|it/s\]")
_FULL_ID = re.compile(r"\b[0-9a-f]{32}\b")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ANSWERED = re.compile(r"answered .*prompt|prompt .*answered", re.IGNORECASE)


_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen_of(raw: str) -> list[str]:
    """The lines a terminal shows after `raw`: enough of a VT100 for what the console
    writes (CR, LF, cursor up, erase line, erase down; styles ignored)."""
    screen = _Vt()
    i = 0
    while i < len(raw):
        if raw[i] != "\x1b":
            screen.put(raw[i])
            i += 1
            continue
        m = _CSI.match(raw, i)
        if m is None:  # an unfinished sequence at the end
            break
        screen.control(m.group(2), int(m.group(1)) if m.group(1).isdigit() else 0)
        i = m.end()
    return [line.rstrip() for line in screen.rows]


class _Vt:
    def __init__(self) -> None:
        self.rows = [""]
        self.row = self.col = 0

    def control(self, op: str, n: int) -> None:
        if op == "A":
            self.row = max(0, self.row - max(n, 1))
        elif op == "K":
            self.rows[self.row] = "" if n == 2 else self.rows[self.row][: self.col]
        elif op == "J":
            self.rows[self.row] = self.rows[self.row][: self.col]
            del self.rows[self.row + 1 :]

    def put(self, ch: str) -> None:
        if ch == "\r":
            self.col = 0
        elif ch == "\n":
            self.row, self.col = self.row + 1, 0
            if self.row == len(self.rows):
                self.rows.append("")
        elif ch >= " " or ch == "\t":
            line = self.rows[self.row].ljust(self.col)
            self.rows[self.row] = line[: self.col] + ch + line[self.col + 1 :]
            self.col += 1


class Terminal:
    """`raven-bot chat` on a pty, stdout and stderr both on it, as a person sees it."""

    def __init__(self, env: dict[str, str]) -> None:
        self._master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [RAVEN, "chat"], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        os.close(slave)
        self.raw = ""
        self._seen = 0

    @property
    def text(self) -> str:
        """Everything shown so far without styles (for waiting on text)."""
        return _ANSI.sub("", self.raw)

    def type(self, line: str) -> None:
        """Type one line and press Enter."""
        os.write(self._master, line.encode() + b"\r")

    def expect(self, text: str) -> None:
        """Wait until `text` appears in output after the last match."""
        deadline = time.monotonic() + WITHIN
        while (found := self.text.find(text, self._seen)) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"never saw {text!r}; output:\n{self.text[self._seen :]}")
        self._seen = found + len(text)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.raw += chunk.decode("utf-8", errors="replace")
        return bool(chunk)

    def end(self) -> int:
        """Ctrl-D; wait for the exit, reading everything shown until then."""
        os.write(self._master, b"\x04")
        deadline = time.monotonic() + WITHIN
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        while self._read(0):
            pass
        return self.proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the child if it still runs; release the terminal."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._master)


@pytest.fixture
def terminal(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Terminal]:
    # A terminal says what it is (colours depend on it); NO_COLOR would turn them off.
    monkeypatch.delenv("NO_COLOR", raising=False)
    session = Terminal(_env(isolated_env, TERM="xterm-256color"))
    yield session
    session.close()


def _assert_clean(lines: list[str], shown: str, home: Path) -> None:
    """What every console transcript must satisfy (terminal or pipe)."""
    assert not _LOG_LINE.search(shown), shown
    assert not _PROGRESS.search(shown), shown
    assert "**" not in shown, shown
    assert not _FULL_ID.search(shown), shown
    assert len([line for line in lines if _ANSWERED.search(line)]) == 1, shown
    # Each turn starts its own line after a blank one; `you>` and `raven>` never share one.
    for n, line in enumerate(lines):
        assert not ("you>" in line and "raven" in line), shown
        if n and re.match(r"raven( \(.*\))?>|you>", line):
            assert lines[n - 1] == "", f"no blank line before {line!r}:\n{shown}"
    # The logs went to the file instead, with what the model loading said.
    logged = (home / "logs" / "raven.log").read_text(encoding="utf-8")
    assert " INFO core.store.store: applied migrations" in logged
    assert "MiniLM" in logged


def test_pty_transcript_is_clean(terminal: Terminal, isolated_env: Path) -> None:
    terminal.expect("conversation console-1 (type new for a fresh one)")
    terminal.expect("you> ")
    terminal.type("hello")
    terminal.expect("offline mode")
    terminal.expect("you> ")
    terminal.type("r1: research: find X")
    terminal.expect("plan> ")
    terminal.type("confirm")
    terminal.expect("Reply with a number or an option")
    # Answer once the turn's reply is shown, as a person reading it would: a line entered
    # in the very instant a reply is drawn can still lose its blank line (a terminal in line
    # mode says nothing of Enter until the line is read; see ConsoleAdapter._arrived).
    terminal.expect("waits for approval (prompt")
    terminal.expect("you> ")
    terminal.type("1")
    terminal.expect("Nodes:")
    terminal.expect("you> ")
    terminal.type("status")
    terminal.expect("Status: ")
    assert terminal.end() == 0
    lines = screen_of(terminal.raw)
    shown = "\n".join(lines)
    _assert_clean(lines, shown, isolated_env)
    # Rendered for the terminal: styles, no Markdown markers, code blocks without fences.
    assert "\x1b[1m" in terminal.raw
    assert "```" not in shown


async def test_piped_transcript_is_clean_and_plain(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = b"hello\nr1: research: find X\nconfirm\n1\nstatus\n"
    code, out, err = await _run("chat", stdin=script, env=_env(isolated_env), within=WITHIN)
    assert code == 0, err
    lines = out.split("\n")
    _assert_clean(lines, out + err, isolated_env)
    assert "\x1b" not in out  # plain text in a pipe
    assert "Status: running" in out
    assert "raven (update console-" not in out


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_piped_answers_wait_for_their_question_and_eof_does_not_wait_for_an_answer(
    isolated_env: Path,
) -> None:
    # The first run asks to approve its command some time after the plan's turn ended: the
    # `1` answers it (not a free-form message before it). The second asks, and the input
    # ends: the console says so and exits instead of waiting for the prompt to expire.
    script = b"s1: shell: echo one\n\n1\ns2: shell: echo two\n\n"
    code, out, err = await _run("chat", stdin=script, env=_env(isolated_env))
    assert code == 0, err
    first, second = out.split("Output of `s1`:", 1)
    # The `1` was an answer, not a message (which would get the offline notice).
    assert "Answered prompt" in first and not re.search(r"I'm (running )?in offline mode", first)
    assert second.lstrip().startswith("one")
    assert re.search(r"Input ended with a question unanswered \(prompt `[0-9a-f]{8}`\)", second)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_piped_status_updates_are_printed_marked(isolated_env: Path) -> None:
    # The status is posted once `a1` settled; `a2` asks for its approval after that, so the
    # status is edited after other output: a pipe shows the new version, marked.
    script = b"a1: shell: echo one\na2: shell: echo two [after a1]\n\n1\n1\n"
    code, out, err = await _run("chat", stdin=script, env=_env(isolated_env))
    assert code == 0, err
    assert re.search(r"^raven \(updated status\)> Run `run_\w+`", out, re.MULTILINE), out
    assert "raven (update console-" not in out


class _Tty(io.StringIO):
    """A terminal as far as the screen can tell (80 columns, 24 rows)."""

    def isatty(self) -> bool:
        return True


def test_a_status_edited_while_it_is_the_last_block_is_replaced_in_place() -> None:
    out = _Tty()
    screen = Screen(out, on_gone=lambda: None)
    screen.say("conversation console-1")
    screen.say("**Run** 0/2 settled\n- `a` running", key="console-2")
    screen.prompt("you> ")
    screen.update("console-2", "**Run** 1/2 settled\n- `a` completed")
    lines = screen_of(out.getvalue())
    assert lines == [
        "raven> conversation console-1",
        "",
        "raven> Run 1/2 settled",
        "        • a completed",
        "",
        "you>",
    ]


def test_a_status_edited_after_other_output_is_printed_as_an_update() -> None:
    out = _Tty()
    screen = Screen(out, on_gone=lambda: None)
    screen.say("Run 0/2 settled", key="console-1")
    screen.say("Status: running nothing")
    screen.update("console-1", "Run 2/2 settled")
    assert screen_of(out.getvalue()) == [
        "raven> Run 0/2 settled",
        "",
        "raven> Status: running nothing",
        "",
        "raven (updated status)>",
        "       Run 2/2 settled",
        "",
    ]


def test_replies_while_the_prompt_is_shown_take_its_place_and_it_comes_back() -> None:
    out = _Tty()
    screen = Screen(out, on_gone=lambda: None)
    screen.prompt("you> ")
    out.write("hello\n")  # what the terminal echoes as the person types
    screen.entered()
    screen.prompt("you> ")
    screen.say("hi there")
    screen.say("and more")
    assert screen_of(out.getvalue()) == [
        "you> hello",
        "",
        "raven> hi there",
        "",
        "raven> and more",
        "",
        "you>",
    ]


def test_piped_markdown_is_plain_and_keeps_the_command_exactly() -> None:
    out = io.StringIO()
    screen = Screen(out, on_gone=lambda: None)
    command = 'echo "a  b" | grep -c \\*\\* && printf "\x1b[2J"'
    screen.say(f"**Run it?**\n```\n{command}\n```\n- Runs in: _here_", footer=["1) Approve"])
    assert out.getvalue().split("\n") == [
        "raven> Run it?",
        '    echo "a  b" | grep -c \\*\\* && printf "␛[2J"',
        "- Runs in: here",
        "1) Approve",
        "",
    ]


async def test_run_without_platforms_is_the_console_and_logs_to_the_file(
    isolated_env: Path,
) -> None:
    code, out, err = await _run("run", stdin=b"status\n", env=_env(isolated_env))
    assert code == 0, err
    assert "Status:" in out
    assert not _LOG_LINE.search(out + err), err
    logged = (isolated_env / "logs" / "raven.log").read_text(encoding="utf-8")
    assert " INFO core.store.store: applied migrations" in logged


async def test_doctor_names_the_log_file(isolated_env: Path) -> None:
    _, out, _ = await _run("doctor", env=_env(isolated_env))
    assert f"logs: {isolated_env / 'logs' / 'raven.log'}" in out


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Whatever a test configures, the root logger is put back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        handler.close()
    root.handlers[:], root.level = handlers, level


@pytest.mark.usefixtures("root_logging")
def test_console_logging_shows_only_warnings_briefly_and_files_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "logs" / "raven.log"
    configure_logging("INFO", ["sekret-123456"], file=file, console=True)
    log = logging.getLogger("raven.test")
    log.info("hello sekret-123456")
    log.warning("careful")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "raven-bot warning: careful",
        f"raven-bot error: it failed (details in {file})",
    ]
    logged = file.read_text(encoding="utf-8")
    assert "INFO raven.test: hello [redacted]" in logged and "sekret" not in logged
    assert "WARNING raven.test: careful" in logged
    assert "ValueError: boom" in logged


@pytest.mark.usefixtures("root_logging")
def test_platform_logging_keeps_stderr_and_adds_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "logs" / "raven.log"
    configure_logging("INFO", [], file=file, console=False)
    logging.getLogger("raven.test").info("hello")
    assert "INFO raven.test: hello" in capsys.readouterr().err
    assert "INFO raven.test: hello" in file.read_text(encoding="utf-8")
