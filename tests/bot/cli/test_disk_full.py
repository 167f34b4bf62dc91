"""A disk that fills while `raven-bot chat` runs: one line per failure on the terminal, no
traceback, no message said twice over, and the next start reports no run that never began.

The home is a small tmpfs mounted in a mount namespace of the bot's own (`unshare`), so the
disk is really full: every write the bot makes meets ENOSPC, SQLite's and logging's too."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env

pytestmark = pytest.mark.slow

SIZE = "16m"
GUARD = 60.0  # seconds: only a hung bot reaches it
# Mounts the tmpfs on the home, runs the chat on the test's pipes, then (the namespace still
# alive, the disk freed) starts the bot again for its report of the last session.
SCRIPT = """
mount -t tmpfs -o size={size} tmpfs "$RAVEN_HOME" || exit 97
"$1" chat
rm -f "$RAVEN_HOME/filler"
printf 'status\\n' | "$1" chat >"$2" 2>"$3"
"""


def _namespace() -> list[str]:
    """The `unshare` command that may mount a tmpfs here, or a skip saying why not."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = ["sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"]
    candidates = [["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"]]
    for command in candidates if os.geteuid() == 0 else candidates[1:]:
        if subprocess.run([*command, *probe], capture_output=True, check=False).returncode == 0:
            return command
    pytest.skip("no mount namespace here (unshare cannot mount a tmpfs)")


async def _until(stream: asyncio.StreamReader, text: str, seen: list[str]) -> None:
    while not any(text in line for line in seen):
        line = await stream.readline()
        assert line, f"stdout ended before {text!r}:\n{''.join(seen)}"
        seen.append(line.decode())


def _fill(home: Path) -> None:
    """Write until the disk says it is full."""
    chunk = b"\0" * (1 << 16)
    with (home / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


async def test_a_disk_that_fills_while_chatting_says_each_failure_once(
    isolated_env: Path, tmp_path: Path
) -> None:
    unshare = _namespace()
    isolated_env.mkdir()  # noqa: ASYNC240 (before the bot starts)
    after_out, after_err = tmp_path / "after.out", tmp_path / "after.err"
    proc = await asyncio.create_subprocess_exec(
        *unshare,
        "sh",
        "-c",
        SCRIPT.format(size=SIZE),
        "sh",
        RAVEN,
        str(after_out),
        str(after_err),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(isolated_env),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    try:
        # `status` answers once the turn before it finished: the bot is idle, its database
        # log holds room from the commits so far (as a bot that has run a while does).
        proc.stdin.write(b"hello\nstatus\n")
        await asyncio.wait_for(_until(proc.stdout, "Status: running nothing", seen), GUARD)
        # The bot's view of its home, in its namespace.
        await asyncio.to_thread(_fill, Path(f"/proc/{proc.pid}/root{isolated_env}"))
        proc.stdin.write(b"s1: shell: echo hi\n\nhello again\nhello once more\n")
        proc.stdin.close()
        out, err = await asyncio.wait_for(proc.communicate(), GUARD)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    shown = "".join(seen) + out.decode()
    lines = err.decode().splitlines()
    # Each message the full disk refused is said once, and the session went on to the end.
    refused = "could not be recorded (database or disk is full); nothing was sent."
    assert shown.count(refused) == 3, shown + err.decode()
    assert "failed: `submit_graph` failed" not in shown
    # One line per failure: no traceback, no line twice, logging's own error said once.
    assert not any(line.startswith((" ", "Traceback", "---")) for line in lines), lines
    assert len(lines) == len(set(lines)), lines
    assert sum("cannot write the log file" in line for line in lines) == 1, lines
    assert all(line.startswith("raven-bot ") for line in lines), lines
    assert not any("failed: " in line and line.count("failed") > 1 for line in lines), lines
    # The next start: the run that never started is not reported as interrupted.
    again = after_out.read_text(encoding="utf-8")
    assert "Status: running nothing" in again, again + after_err.read_text(encoding="utf-8")
    assert "interrupted" not in again
    assert "interrupted" not in after_err.read_text(encoding="utf-8")
