"""One short command run to its end on a registered machine, as a campaign round runs:
submitted detached, polled, its log read incrementally, terminated at its time limit. The
standing checks of scheduled tasks run through this.

The round's directory is the caller's (`request.workdir`); on local and Slurm machines it
is on this host and is removed afterwards. An unreachable machine is a result, never an
exception: a check says it could not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oncall.model import JobHandle, JobRequest, Machine, MachineUnavailable

POLL_SECONDS = 0.5
OUTPUT_CAP = 16_000
_TERMINATE_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class ProbeResult:
    """How the command ended: its exit code (None when it did not exit), the tail of what
    it printed, whether its time ran out, and why it could not run (empty when it ran)."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    error: str = ""


async def probe(
    machine: Machine,
    request: JobRequest,
    *,
    time_limit: float,
    poll_seconds: float = POLL_SECONDS,
    output_cap: int = OUTPUT_CAP,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """Run `request` on `machine` until it exits, vanishes or `time_limit` passes."""
    try:
        handle = await machine.submit(request)
    except MachineUnavailable as exc:
        return ProbeResult(None, "", error=str(exc))
    log = _Log(machine, handle, output_cap)
    deadline = clock() + time_limit
    try:
        while True:
            await log.read()
            status = await machine.poll(handle)
            if status.state == "exited":
                await log.read()
                return ProbeResult(status.exit_code, log.text)
            if status.state == "vanished":
                return ProbeResult(None, log.text, error=status.detail or "the command vanished")
            if clock() >= deadline:
                await _stop(machine, handle)
                await log.read()
                return ProbeResult(None, log.text, timed_out=True)
            await asyncio.sleep(poll_seconds)
    except MachineUnavailable as exc:
        await _stop(machine, handle)
        return ProbeResult(None, log.text, error=str(exc))
    except asyncio.CancelledError:
        # A cancelled check leaves nothing running on the machine.
        await asyncio.shield(_stop(machine, handle))
        raise
    finally:
        if machine.spec.kind != "ssh":  # a local or Slurm round's directory is on this host
            await asyncio.to_thread(shutil.rmtree, Path(request.workdir), ignore_errors=True)


class _Log:
    """The round's output so far, its last `cap` bytes kept."""

    def __init__(self, machine: Machine, handle: JobHandle, cap: int) -> None:
        self._machine = machine
        self._handle = handle
        self._cap = cap
        self._offset = 0
        self._tail = b""

    async def read(self) -> None:
        while chunk := await self._machine.read_log(self._handle, self._offset):
            self._offset += len(chunk)
            self._tail = (self._tail + chunk)[-self._cap :]

    @property
    def text(self) -> str:
        return self._tail.decode("utf-8", errors="replace")


async def _stop(machine: Machine, handle: JobHandle) -> None:
    with contextlib.suppress(MachineUnavailable):
        await machine.terminate(handle, grace_seconds=_TERMINATE_GRACE_SECONDS)
