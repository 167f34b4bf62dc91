"""One running ACP agent: its process in the sandbox (its own process group, a scrubbed
environment), the SDK's client-side connection to it, and what it said at `initialize`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acp import PROTOCOL_VERSION
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from agents.backends.acp.client import RavenClient
from agents.backends.acp.frames import MAX_FRAME_BYTES, FrameGuard
from agents.process import scrub_env
from agents.registry import AgentEntry
from agents.sandbox import Sandbox
from core.secret_names import SecretNames
from core.spawn import kill_process, start_uncancelled

STDERR_TAIL_CHARS = 2000
CLIENT_INFO = Implementation(name="raven-bot", title="raven-bot", version="1")


class AgentStartError(RuntimeError):
    """The agent did not start or did not answer `initialize`; the message says why, and
    `stderr` holds the end of what the agent wrote (its text, not ours)."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


@dataclass(frozen=True)
class AgentInfo:
    """What the agent said about itself at `initialize`."""

    name: str
    version: str
    load_session: bool
    close_session: bool = False
    # `mcpCapabilities.http`: the agent's sessions may be given MCP servers over HTTP.
    mcp_http: bool = False


class AcpProcess:
    """A started agent; `close` ends its whole process group."""

    def __init__(
        self,
        entry: AgentEntry,
        process: asyncio.subprocess.Process,
        guard: FrameGuard,
        client: RavenClient,
    ) -> None:
        self.entry = entry
        self.client = client
        self._process = process
        self._guard = guard
        self._stderr = bytearray()
        self.conn = ClientSideConnection(client, _writer(process), guard.reader)
        self._tasks = [
            asyncio.create_task(guard.pump(), name=f"acp-{entry.name}-frames"),
            asyncio.create_task(self._drain_stderr(), name=f"acp-{entry.name}-stderr"),
        ]
        self.info = AgentInfo(entry.name, "", load_session=False)
        # The sessions this process holds (a restarted agent holds none until loaded).
        self.sessions: set[str] = set()
        self.last_used = time.monotonic()

    @classmethod
    async def start(
        cls,
        entry: AgentEntry,
        *,
        workspace: Path,
        sandbox: Sandbox,
        secret_names: SecretNames,
        environ: Mapping[str, str],
    ) -> AcpProcess:
        """Start `entry`'s agent in `workspace` and initialize it (`AgentStartError` if not)."""
        env = scrub_env(
            environ,
            secret_names=secret_names,
            allow=entry.env_allow,
            secrets=(entry.api_key_env,) if entry.api_key_env else (),
        )
        argv = list(entry.command)
        if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
            raise AgentStartError(
                f"`{argv[0]}` was not found on PATH: "
                f"{os.strerror(errno.ENOENT).lower()}. Install it, or fix [agents.{entry.name}] "
                "command in agents.toml."
            )
        where = await asyncio.to_thread(_prepared, workspace)
        launch = sandbox.launch(argv, workspace=where, env=env, network=entry.network)
        process = await start_uncancelled(
            asyncio.create_subprocess_exec(
                *launch.argv,
                preexec_fn=launch.preexec,
                cwd=str(where),
                env=dict(env),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=MAX_FRAME_BYTES + 1,
                start_new_session=True,  # its own group: closing it reaches what it started
            ),
            kill_process,
        )
        assert process.stdout is not None
        agent = cls(entry, process, FrameGuard(process.stdout), RavenClient())
        try:
            await agent._initialize()
        except BaseException:
            await asyncio.shield(agent.close())
            raise
        return agent

    async def _initialize(self) -> None:
        try:
            async with asyncio.timeout(self.entry.init_timeout_seconds):
                answer = await self.conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    # File reads, for the run records outside its sandbox; no writes and no
                    # terminal: the agent uses its own tools, inside the sandbox.
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=True)
                    ),
                    client_info=CLIENT_INFO,
                )
        except TimeoutError:
            raise AgentStartError(
                f"it did not answer `initialize` within {self.entry.init_timeout_seconds:g} s",
                self.stderr_tail(),
            ) from None
        except (ConnectionError, OSError) as exc:
            raise AgentStartError(
                f"it ended before `initialize` ({type(exc).__name__})", self.stderr_tail()
            ) from None
        info = answer.agent_info
        caps = answer.agent_capabilities
        sessions = caps.session_capabilities if caps else None
        mcp = caps.mcp_capabilities if caps else None
        self.info = AgentInfo(
            info.name if info else self.entry.name,
            (info.version or "") if info else "",
            bool(caps and caps.load_session),
            bool(sessions and sessions.close is not None),
            mcp_http=bool(mcp and mcp.http),
        )

    @property
    def alive(self) -> bool:
        return self._process.returncode is None and self._guard.malformed is None

    def failure(self) -> str:
        """Why the connection ended, in words (empty while it runs)."""
        if self._guard.malformed is not None:
            return "it sent a malformed frame"
        code = self._process.returncode
        if code is None:
            return ""
        return f"its process exited with {code}" if code >= 0 else f"killed by signal {-code}"

    @property
    def malformed_frame(self) -> str:
        """The frame that was no JSON object, as the agent wrote it ("" if none)."""
        return self._guard.malformed or ""

    def stderr_tail(self) -> str:
        """The end of what the agent wrote on stderr."""
        return self._stderr.decode("utf-8", errors="replace").strip()[-STDERR_TAIL_CHARS:]

    async def wait_exit(self, seconds: float) -> None:
        """Until the process ended or `seconds` passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._process.wait()), seconds)

    async def close(self, *, grace: float = 2.0) -> None:
        """Close the connection, then end the process group (TERM, then KILL after `grace`)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.close(), grace)
        _signal_group(self._process.pid, signal.SIGTERM)
        await self.wait_exit(grace)
        await kill_process(self._process)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _drain_stderr(self) -> None:
        stream = self._process.stderr
        if stream is None:
            return
        while chunk := await stream.read(4096):
            self._stderr += chunk
            del self._stderr[: max(0, len(self._stderr) - STDERR_TAIL_CHARS * 4)]


def _prepared(workspace: Path) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace.resolve()


def _writer(process: asyncio.subprocess.Process) -> asyncio.StreamWriter:
    assert process.stdin is not None
    return process.stdin


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
