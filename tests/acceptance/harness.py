"""Run the real `raven-bot` as a person does: in a project directory holding `.venv`, with
the product's default settings, no model key, a terminal (pty) for the console and plain
processes for the command line. Every wait is on output or a condition, with a hang guard."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import helpers
from tests.helpers import processes_with

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
RAVEN = ".venv/bin/raven-bot"  # as the README writes it, run from a project directory
WITHIN = 180.0  # hang guard for one wait (2 shared cores, other suites running), not a timing

# Settings a user's shell would not have: credentials, proxies, and the test suite's own
# switches (RAVEN_SKILLS=false, the keyword embedder, rule episodes). What is left is what
# a user who followed the README has: the product defaults.
_DROPPED_PREFIXES = ("RAVEN_", "ANTHROPIC_", "SLACK_", "DISCORD_")


def product_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who installed the bot: defaults, no key, `RAVEN_HOME`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROPPED_PREFIXES) and not k.lower().endswith("_proxy")
    }
    env["RAVEN_HOME"] = str(home)
    # The README writes both `.venv/bin/raven-bot …` and `raven-bot …` (an activated venv).
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def slack_env(home: Path, api_url: str, **extra: str) -> dict[str, str]:
    """`product_env` of a user whose bot is connected to Slack (Socket Mode) at `api_url`."""
    return product_env(
        home,
        SLACK_BOT_TOKEN="xoxb-0000-1111-acceptance",
        SLACK_APP_TOKEN="xapp-1-A1-0000-acceptance",
        RAVEN_SLACK_API_URL=api_url,
        **extra,
    )


@contextlib.asynccontextmanager
async def serving(
    env: dict[str, str], cwd: Path, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`raven-bot run` in `cwd` (its output to `log`); its whole process group is killed after."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            RAVEN,
            "run",
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), WITHIN)


def project_dir(path: Path) -> Path:
    """A working directory where the README's `.venv/bin/raven-bot` works as written (the
    repository's own directory would read the developer's `.env`)."""
    path.mkdir(parents=True, exist_ok=True)
    link = path / ".venv"
    if not link.exists():
        link.symlink_to(VENV)
    return path


@dataclass(frozen=True)
class Result:
    """How a command line ended and what it printed."""

    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        """What a terminal shows: both streams."""
        return self.out + self.err


def sh(command: str, *, env: dict[str, str], cwd: Path, stdin: str = "") -> Result:
    """Run one README command line exactly as typed, in `sh`, from the project directory."""
    done = subprocess.run(
        ["sh", "-c", command],
        input=stdin.encode(),
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=WITHIN * 2,
        check=False,
    )
    return Result(
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
    )


Ran = tuple[str, Result]  # a command line and how it ended
Step = str | Callable[[list[Ran]], str]  # a command line, or one made from the earlier results


class Commands:
    """Command lines typed in a shell in `cwd`, now or in the background (chains: one after
    another, independent of the rest); what each showed is kept for the noise checks."""

    def __init__(self, cwd: Path, env: dict[str, str], pool: ThreadPoolExecutor) -> None:
        self.cwd = cwd
        self.env = env
        self.pool = pool
        self.shown: list[tuple[str, str]] = []
        self._later: dict[str, Future[Any]] = {}

    def sh(self, command: str, stdin: str = "", home: Path | None = None) -> Result:
        """Run one command line (against another RAVEN_HOME when given)."""
        env = self.env if home is None else {**self.env, "RAVEN_HOME": str(home)}
        result = sh(command, env=env, cwd=self.cwd, stdin=stdin)
        self.shown.append((command, result.both))
        return result

    def chain(self, name: str, steps: list[Step], home: Path | None = None) -> None:
        """Start running `steps` one after another in the background."""

        def run() -> list[Ran]:
            done: list[Ran] = []
            for step in steps:
                command = step if isinstance(step, str) else step(done)
                done.append((command, self.sh(command, home=home)))
            return done

        self._later[name] = self.pool.submit(run)

    def start(self, name: str, work: Callable[[], Any]) -> None:
        """Start any work in the background, by name."""
        self._later[name] = self.pool.submit(work)

    def result(self, name: str) -> Any:
        """What the background work `name` returned (waiting for it); its error if it failed."""
        return self._later[name].result(timeout=WITHIN * 4)

    def settle(self) -> None:
        """Wait for everything started in the background."""
        for name in list(self._later):
            self.result(name)


class Console:
    """`.venv/bin/raven-bot chat` in a terminal: stdin, stdout AND stderr on one pty, as a
    person sees it. Type lines; wait for output; everything shown is kept in `transcript`."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._master, slave = pty.openpty()
        # A real terminal has a size (progress bars and wrapping depend on it).
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        self.proc = subprocess.Popen(
            [RAVEN, "chat"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.transcript = ""  # what a person read: see `screen_text`
        self._pending = ""  # the start of an escape sequence not complete yet
        self._seen = 0  # output before this offset was matched by an earlier wait

    def type(self, line: str) -> None:
        """Type one line and press Enter."""
        os.write(self._master, line.encode() + b"\r")

    def expect(self, pattern: str, within: float = WITHIN) -> str:
        """Wait until `pattern` (a regex) matches output not matched before; return that new
        output up to the end of the match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + within
        while True:
            found = regex.search(self.transcript, self._seen)
            if found is not None:
                new = self.transcript[self._seen : found.end()]
                self._seen = found.end()
                return new
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(
                    f"never saw {pattern!r}; output since the last match:\n"
                    f"{self.transcript[self._seen :]}"
                )

    def expect_text(self, text: str, within: float = WITHIN) -> str:
        """`expect` for a literal text."""
        return self.expect(re.escape(text), within)

    def skip(self) -> None:
        """Forget unmatched output: the next wait only looks at what comes after now."""
        self.drain()
        self._seen = len(self.transcript)

    def drain(self) -> None:
        """Read what is already waiting on the terminal."""
        while self._read(0):
            pass

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], max(timeout, 0))
        if not ready:
            return False
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        text = chunk.decode("utf-8", errors="replace")
        self._pending, shown = _split_incomplete(self._pending + text)
        self.transcript += screen_text(shown)
        return bool(chunk)

    def kill(self) -> None:
        """`kill -9` the bot's process (a crash), keeping what it showed. Only the bot: what
        it started must die with it by itself."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=WITHIN)
        self.drain()

    def end(self) -> int:
        """Ctrl-D (end of input); wait for the bot to exit; its exit code."""
        os.write(self._master, b"\x04")
        deadline = time.monotonic() + WITHIN
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        self.drain()
        return self.proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the bot and anything left in its process group; release the terminal."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=WITHIN)
        with contextlib.suppress(OSError):
            os.close(self._master)


# Terminal control sequences: CSI (colours, erase, cursor moves), OSC (titles, links), and
# the two-byte escapes.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$|\r$")


def _split_incomplete(text: str) -> tuple[str, str]:
    """(an unfinished escape sequence, or a carriage return that may start a CRLF, at the
    end of `text`; the text before it)."""
    tail = _INCOMPLETE.search(text)
    return (text[tail.start() :], text[: tail.start()]) if tail else ("", text)


def screen_text(text: str) -> str:
    """Terminal output as text a person reads, the same whether the bot rendered Markdown
    for the terminal (styles, redrawn lines) or printed it plain: escape sequences removed,
    a carriage return that redraws a line made a line break, and the Markdown markers a
    terminal shows as styles (`**`, backticks) removed."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("**", "").replace("`", "")


def end_processes_under(root: Path) -> None:
    """Kill every process whose command line names a path under `root`: what a test that
    failed half-way left running there (a foreground campaign, its detached round)."""
    for pid in processes_with(str(root)):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def running(*argv: str) -> bool:
    """Whether a process with exactly this command line runs (sandboxed ones too: their PID
    namespace hides the host from them, not them from the host)."""
    wanted = [a.encode() for a in argv]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[: len(wanted)] == wanted:
                return True
    return False


def wait_until(cond: Callable[[], bool], what: str, within: float = WITHIN) -> None:
    """Poll a condition on state another process owns; fail naming `what` after `within`
    (the suite's `wait_until`, with the acceptance hang guard)."""
    helpers.wait_until(cond, what, within)


# What a person must never read: the markers that fence untrusted data for models, log
# lines, library progress bars, tracebacks.
# (A log line may follow a prompt on the same screen line: not anchored.)
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S")
_NOISE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a fence marker", re.compile(r"</?untrusted-data\b", re.IGNORECASE)),
    ("a log line", _LOG_LINE),
    ("a progress bar", re.compile(r"Loading weights|it/s\]")),
    ("a traceback", re.compile(r"Traceback \(most recent call last\)")),
)


def noise(text: str, raw_ids: tuple[str, ...] = ()) -> list[str]:
    """The lines of `text` a person should not see, each labelled with why."""
    found: list[str] = []
    for line in text.splitlines():
        for why, regex in _NOISE:
            if regex.search(line):
                found.append(f"{why}: {line.strip()[:200]}")
        for raw in raw_ids:
            if re.search(rf"(?<![\w<@]){re.escape(raw)}(?!\w)", line):
                found.append(f"a raw id {raw}: {line.strip()[:200]}")
    return found
