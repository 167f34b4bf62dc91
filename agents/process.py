"""Running child processes for agents: scrubbed environment, own process group, timeout, cap.

One implementation serves both the command-line agent backend and the `run_shell` tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agents.sandbox import Sandbox
from core.secret_names import SecretNames
from core.spawn import start_uncancelled

BASE_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER")
STDERR_TAIL_CHARS: Final = 2000
_READ_CHUNK: Final = 65536
# After the main process exits, leftovers holding its pipes get this long before being killed.
_DRAIN_GRACE_SECONDS: Final = 1.0


def scrub_env(
    environ: Mapping[str, str],
    *,
    secret_names: SecretNames,
    allow: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> dict[str, str]:
    """The child environment: base variables plus `allow`, minus anything `secret_names`
    calls secret (the settings' declared names, given by the assembly root, and the pattern).

    `secrets` names credentials deliberately granted to this child (an agent's own
    `api_key_env`); nothing else secret-looking passes, even if listed in `allow`.
    """
    granted = set(secrets)
    names = [*BASE_ENV, *allow, *granted]
    env: dict[str, str] = {}
    for name in names:
        if name not in environ:
            continue
        if secret_names.looks_secret(name) and name not in granted:
            continue
        env[name] = environ[name]
    return env


@dataclass(frozen=True)
class ProcessResult:
    """How a child process ended and what it printed (capped)."""

    exit_code: int | None
    stdout: str
    stderr_tail: str
    timed_out: bool
    truncated: bool
    seconds: float

    @property
    def ok(self) -> bool:
        """True when it exited 0 within the timeout."""
        return self.exit_code == 0 and not self.timed_out


# The line a capped output carries where its middle was dropped: how many line breaks and
# bytes went (a report counts the lines in, so a long output's omitted count stays true).
OMITTED_LINE: Final = re.compile(
    r"…\[(?P<lines>[\d,]+) lines?, (?P<bytes>[\d,]+) bytes of output omitted\]…"
)


def omitted_line(lines: int, size: int) -> str:
    """The line that stands for a dropped middle of `lines` line breaks and `size` bytes."""
    return f"…[{lines:,} line{'' if lines == 1 else 's'}, {size:,} bytes of output omitted]…"


class _Capture:
    """Keeps the head and the tail of a stream within a byte cap; the middle is dropped."""

    def __init__(self, cap: int) -> None:
        self._cap = max(cap, 2)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        self._breaks = 0  # line breaks seen, kept or not

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._breaks += chunk.count(b"\n")
        room = self._cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            excess = len(self._tail) - self._cap // 2
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > self._cap

    def text(self) -> str:
        if not self.truncated:
            return self._head.decode(errors="replace")
        half = self._cap // 2
        head = bytes(self._head[:half])
        tail = (bytes(self._head[half:]) + bytes(self._tail))[-half:]
        omitted = self.total - half - len(tail)
        breaks = self._breaks - head.count(b"\n") - tail.count(b"\n")
        return (
            head.decode(errors="replace")
            + f"\n{omitted_line(breaks, omitted)}\n"
            + tail.decode(errors="replace")
        )

    def tail_text(self, chars: int) -> str:
        data = (bytes(self._head) + bytes(self._tail))[-chars:]
        return data.decode(errors="replace")


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Signals the leader's exit at once; `Process.wait()` (3.11) also waits for the pipes."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    sandbox: Sandbox,
    stdin_data: bytes | None = None,
    timeout: float,  # noqa: ASYNC109 - the timeout is enforced here, with a process-group kill
    output_cap: int,
    merge_stderr: bool = False,
    kill_grace: float = 2.0,
    network: bool = True,
    readonly: Sequence[Path] = (),
) -> ProcessResult:
    """Run argv in its own process group; kill the whole group on timeout or cancellation.

    Output beyond `output_cap` is still drained (so the child never blocks on a full pipe)
    but only its head and tail are kept, and the result is marked truncated. Processes the
    command leaves behind are killed when it ends. It runs inside `sandbox`, which raises
    `SandboxUnavailable` when it refuses. Raises `FileNotFoundError` or `PermissionError`
    when the program cannot be started.
    """
    # Checked here, where the error is clear; inside the sandbox it would be bwrap's exit 1.
    if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    launch = sandbox.launch(argv, workspace=cwd, env=env, network=network, readonly=readonly)
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    transport, protocol = await start_uncancelled(
        loop.subprocess_exec(
            lambda: _ExitAwareProtocol(_READ_CHUNK, loop),
            *launch.argv,
            preexec_fn=launch.preexec,
            cwd=str(cwd),
            env=dict(env),
            stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill reaches grandchildren too
        ),
        _kill_started,
    )
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    out = _Capture(output_cap)
    err = _Capture(STDERR_TAIL_CHARS * 2)
    readers = [asyncio.create_task(_drain(proc.stdout, out))]
    if proc.stderr is not None:
        readers.append(asyncio.create_task(_drain(proc.stderr, err)))
    writer = (
        asyncio.create_task(_feed(proc.stdin, stdin_data))
        if stdin_data is not None and proc.stdin is not None
        else None
    )
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                await protocol.exited.wait()
                _, pending = await asyncio.wait(readers, timeout=_DRAIN_GRACE_SECONDS)
                if pending:  # background leftovers still hold the pipes
                    _kill_group(proc.pid, signal.SIGKILL)
                    await asyncio.wait(readers)
        except TimeoutError:
            timed_out = True
            await _terminate(proc.pid, protocol, kill_grace)
            await asyncio.wait(readers, timeout=_DRAIN_GRACE_SECONDS)
    finally:
        # Always, also on cancellation: no process of this run outlives it.
        _kill_group(proc.pid, signal.SIGKILL)
        for task in [*readers, *([writer] if writer else [])]:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.shield(asyncio.wait_for(protocol.exited.wait(), _DRAIN_GRACE_SECONDS))
        transport.close()
    return ProcessResult(
        exit_code=proc.returncode,
        stdout=out.text(),
        stderr_tail=err.tail_text(STDERR_TAIL_CHARS),
        timed_out=timed_out,
        truncated=out.truncated,
        seconds=time.monotonic() - started,
    )


async def _drain(stream: asyncio.StreamReader | None, sink: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_READ_CHUNK):
        sink.feed(chunk)


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    # A child that never reads stdin (or exits early) is not an error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()
        await stdin.wait_closed()


async def _terminate(pgid: int, protocol: _ExitAwareProtocol, grace: float) -> None:
    """SIGTERM the group, then SIGKILL it if the leader is still there after `grace`."""
    _kill_group(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(protocol.exited.wait(), timeout=grace)
    _kill_group(pgid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(protocol.exited.wait(), timeout=grace)


async def _kill_started(started: tuple[asyncio.SubprocessTransport, _ExitAwareProtocol]) -> None:
    """A start its caller no longer waits for: kill the group, release the pipes."""
    transport, protocol = started
    pid = transport.get_pid()
    if pid is not None:
        _kill_group(pid, signal.SIGKILL)
    transport.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(protocol.exited.wait(), _DRAIN_GRACE_SECONDS)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def describe_exit(result: ProcessResult, *, what: str, timeout: float) -> str | None:
    """A one-paragraph error for a failed run, or None when it succeeded."""
    if result.timed_out:
        return f"{what} timed out after {timeout:g} s and was stopped."
    code = result.exit_code
    if code == 0:
        return None
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}"
    else:
        how = f"exited with code {code}"
    tail = result.stderr_tail.strip()
    return f"{what} {how}." + (f"\nstderr (last lines):\n{tail}" if tail else "")
