"""The local machine: a round is a detached process group on this host, inside the sandbox.

The sandbox arrives by dependency injection (`CommandWrapper`): oncall does not know agents.
The round's leader (`_runner.py`) is outside the sandbox, in a session of its own, re-parented
to init as soon as it starts, so a bot restart does not touch it; it records the exit code in
the round directory, which is how `poll` learns the end even after a restart. The command runs in
the campaign's working directory (the user's project, mounted writable at its own path) or, without
one, in the round's empty `work/`; the log and the exit code stay in the round directory under
RAVEN_HOME, out of its reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from core.secret_names import SecretNames
from core.spawn import kill_process, start_uncancelled
from oncall.machines import _proc
from oncall.machines.common import (
    EXIT_NAME,
    LOG_NAME,
    command_dir,
    exited,
    prepare_round_dir,
    read_chunk,
    read_exit_file,
    round_dir,
    round_env,
    split_job_id,
)
from oncall.model import JobHandle, JobRequest, JobStatus, MachineSpec, MachineUnavailable

Clock = Callable[[], float]
_RUNNER: Final = Path(__file__).with_name("_runner.py")
_START_TIMEOUT_SECONDS: Final = 30.0
# After the SIGKILL, how long the leader gets to record the code before it is killed too.
_KILL_WAIT_SECONDS: Final = 5.0
_POLL_INTERVAL_SECONDS: Final = 0.05


class CommandWrapper(Protocol):
    """Confines a command to a workspace (the agent sandbox, in its detached mode)."""

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        readonly: Sequence[Path] = (),
    ) -> Sequence[str]:
        """The argv that runs `argv` confined to `workspace` (writable) with `readonly` also
        visible; raises if it refuses."""
        ...


class LocalMachine:
    """Runs rounds as detached processes on this host, each inside the wrapper."""

    def __init__(
        self,
        spec: MachineSpec,
        wrapper: CommandWrapper,
        *,
        secret_names: SecretNames,
        clock: Clock = time.time,
        environ: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        """`secret_names`: the settings' secret names, never passed to a round."""
        self._spec = spec
        self._secret_names = secret_names
        self._wrapper = wrapper
        self._clock = clock
        self._environ = environ
        self._python = python

    @property
    def spec(self) -> MachineSpec:
        """Its registration."""
        return self._spec

    async def submit(self, request: JobRequest) -> JobHandle:
        """Start the round detached in its directory; `MachineUnavailable` if refused."""
        directory = await asyncio.to_thread(
            prepare_round_dir, Path(round_dir(self._spec, request)), work=request.cwd is None
        )
        log, exit_path = directory / LOG_NAME, directory / EXIT_NAME
        workdir = await asyncio.to_thread(command_dir, self._spec, request, directory)
        env = round_env(
            os.environ if self._environ is None else self._environ,
            secret_names=self._secret_names,
        )
        try:
            wrapped = self._wrapper.wrap(
                ["sh", "-c", request.command],
                workspace=workdir,
                env=env,
                readonly=[Path(m) for m in self._spec.mounts],
            )
        except Exception as exc:
            # Whatever the assembly root's wrapper raises (a refusing sandbox says how to
            # fix it) means this machine cannot run the round now: recorded, not a crash.
            raise MachineUnavailable(f"{self._spec.name}: refused to start: {exc}") from exc
        pid, start = await self._launch(
            [self._python, "-I", "-S", str(_RUNNER), str(log), str(exit_path), "--", *wrapped],
            workdir=workdir,
            env=env,
        )
        return JobHandle(
            machine=self._spec.name,
            kind="local",
            job_id=f"{pid}:{start}",
            host=socket.gethostname(),
            started_at=self._clock(),
            log_path=str(log),
            exit_path=str(exit_path),
        )

    async def _launch(
        self, argv: list[str], *, workdir: Path, env: Mapping[str, str]
    ) -> tuple[int, str]:
        """Run the launcher (it forks the leader and returns at once); the leader's identity."""
        try:
            proc = await start_uncancelled(
                asyncio.create_subprocess_exec(
                    *argv,
                    cwd=workdir,
                    env=dict(env),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=True,
                ),
                kill_process,
            )
        except OSError as exc:
            raise MachineUnavailable(
                f"{self._spec.name}: could not start the round: {exc}"
            ) from exc
        try:
            async with asyncio.timeout(_START_TIMEOUT_SECONDS):
                out, err = await proc.communicate()
        except TimeoutError:
            # The launcher only forks and prints: hanging means this host is in trouble.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise MachineUnavailable(
                f"{self._spec.name}: the round did not start within {_START_TIMEOUT_SECONDS:.0f} s"
            ) from None
        fields = out.decode(errors="replace").split()
        if proc.returncode != 0 or len(fields) != 2 or not fields[0].isdigit():
            said = err.decode(errors="replace").strip()[-500:] or f"exit {proc.returncode}"
            raise MachineUnavailable(f"{self._spec.name}: could not start the round: {said}")
        return int(fields[0]), fields[1]

    async def poll(self, handle: JobHandle) -> JobStatus:
        """Exited (its exit-code file), running (the leader lives), else vanished."""
        return await asyncio.to_thread(self._poll, handle)

    def _poll(self, handle: JobHandle) -> JobStatus:
        text = read_exit_file(Path(handle.exit_path))
        if text is not None:
            return exited(text)
        pid, start = split_job_id(handle.job_id)
        if handle.host != socket.gethostname():
            return JobStatus(
                state="unknown",
                detail=f"started on host {handle.host}, this is {socket.gethostname()}",
            )
        if _proc.alive(pid, start):
            return JobStatus(state="running", detail=f"pid {pid}")
        # It may have ended between the two looks.
        text = read_exit_file(Path(handle.exit_path))
        if text is not None:
            return exited(text)
        return JobStatus(state="vanished", detail=f"process {pid} is gone without an exit code")

    async def read_log(self, handle: JobHandle, offset: int) -> bytes:
        """Output written since byte `offset` (at most 1 MiB per call)."""
        return await asyncio.to_thread(read_chunk, Path(handle.log_path), offset)

    async def terminate(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """SIGTERM to every process of the round, SIGKILL to what is left after the grace."""
        pid, start = split_job_id(handle.job_id)
        if handle.host != socket.gethostname():
            return  # not on this host: nothing here to signal

        def leader_gone() -> bool:
            return not _proc.alive(pid, start)

        if await asyncio.to_thread(leader_gone):
            return

        # The leader itself stays (its handler ignores SIGTERM) to record the exit code. The
        # sandbox's own bwrap processes are spared the SIGTERM: they would die of it, and the
        # sandbox dies with them (--die-with-parent), before the command could use its grace.
        # Once the command exits they exit too; the SIGKILL below spares nothing.
        await asyncio.to_thread(
            lambda: _proc.send(
                [p for p in _proc.descendants(pid) if p.name != "bwrap"], signal.SIGTERM
            )
        )
        if await _until(leader_gone, grace_seconds):
            return

        def kill_rest() -> bool:
            # Every round: a process may fork while it is being killed.
            _proc.send(_proc.descendants(pid), signal.SIGKILL)
            return leader_gone()

        if await _until(kill_rest, _KILL_WAIT_SECONDS):
            return
        await asyncio.to_thread(_proc.send, [_proc.Proc(pid, 0, "R", start)], signal.SIGKILL)
        await _until(leader_gone, _KILL_WAIT_SECONDS)


async def _until(cond: Callable[[], bool], within: float) -> bool:
    """Check `cond` (in a thread) until it holds or `within` seconds pass; whether it held."""
    deadline = time.monotonic() + within
    while True:
        if await asyncio.to_thread(cond):
            return True
        if time.monotonic() >= deadline:
            return False
        # The processes are not ours to wait on (they are re-parented away): poll.
        await asyncio.sleep(_POLL_INTERVAL_SECONDS)
