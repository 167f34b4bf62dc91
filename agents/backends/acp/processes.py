"""The running ACP agents: one process per agent and conversation workspace, started on first
use, kept while it serves turns, closed when idle for its `idle_seconds` and at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agents.registry import AgentEntry
from agents.sandbox import Sandbox
from core.keyed import KeyedLocks
from core.secret_names import SecretNames

if TYPE_CHECKING:  # the SDK is imported when the first agent starts, not at start-up
    from agents.backends.acp.process import AcpProcess

REAP_EVERY_SECONDS = 30.0


class AcpProcesses:
    """The pool; `close` ends every agent process it started."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        secret_names: SecretNames,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sandbox = sandbox
        self._secret_names = secret_names
        self._environ = environ
        self._clock = clock
        self._running: dict[tuple[str, str], AcpProcess] = {}
        # The turns holding each process (one entry per `acquire` not yet released).
        self._held: dict[tuple[str, str], list[AcpProcess]] = {}
        self._locks = KeyedLocks()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    async def acquire(self, entry: AgentEntry, workspace: Path) -> AcpProcess:
        """The agent's process for `workspace` (started now if none runs), held until
        `release`; `AgentStartError` when it cannot start."""
        if self._closed:
            raise RuntimeError("the agent processes are closed (the bot is stopping)")
        key = (entry.name, str(workspace))
        async with self._locks.hold(f"{key[0]}\n{key[1]}"):
            process = self._running.get(key)
            if process is not None and not process.alive:
                await self._drop(key)
                process = None
            if process is None:
                from agents.backends.acp.process import AcpProcess

                process = await AcpProcess.start(
                    entry,
                    workspace=workspace,
                    sandbox=self._sandbox,
                    secret_names=self._secret_names,
                    environ=os.environ if self._environ is None else self._environ,
                )
                self._running[key] = process
                self._ensure_reaper()
            self._held.setdefault(key, []).append(process)
            return process

    def release(self, process: AcpProcess, workspace: Path) -> None:
        """A turn is done with `process` (once per `acquire`)."""
        key = (process.entry.name, str(workspace))
        process.last_used = self._clock()
        if process in self._held.get(key, []):
            self._held[key].remove(process)

    async def discard_if_idle(self, process: AcpProcess, workspace: Path) -> None:
        """End `process` unless another turn holds it."""
        if not self._held.get((process.entry.name, str(workspace))):
            await self.discard(process, workspace)

    async def discard(self, process: AcpProcess, workspace: Path) -> None:
        """End a process that failed (crashed, sent garbage, did not settle after a cancel)."""
        key = (process.entry.name, str(workspace))
        if self._running.get(key) is process:
            await self._drop(key)
        else:
            await process.close()

    async def reap(self) -> int:
        """Close the processes idle past their agent's `idle_seconds`; how many."""
        now = self._clock()
        idle = [
            key
            for key, process in self._running.items()
            if not self._held.get(key) and now - process.last_used >= process.entry.idle_seconds
        ]
        for key in idle:
            await self._drop(key)
        return len(idle)

    def running(self) -> int:
        return len(self._running)

    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*(self._drop(key) for key in list(self._running)))

    async def _drop(self, key: tuple[str, str]) -> None:
        process = self._running.pop(key, None)
        self._held.pop(key, None)
        if process is not None:
            await asyncio.shield(process.close())

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap_forever(), name="acp-reaper")

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_SECONDS)
            await self.reap()
