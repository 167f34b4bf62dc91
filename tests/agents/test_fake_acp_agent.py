"""The loopback ACP agent (tests/fakes/acp_agent.py), driven through the SDK's client side.

Each test starts the fake as a real process with `acp.spawn_agent_process`, so what is proved
here is what a client of the fake will see: the updates, the permission requests, the stop
reasons, the exit statuses and stderr, and what the SDK does with a broken stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from asyncio.subprocess import Process
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    FileEditToolCallContent,
    KillTerminalResponse,
    PermissionOption,
    PromptResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TerminalOutputResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

FAKE_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp_agent.py"
# Bound on every wait for something that should happen: generous, never reached when green.
TIMEOUT = 10.0
# How long "it did not answer" is watched for, where silence is the behaviour under test.
SILENCE = 2.0

Update = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)
U = TypeVar("U", bound=Update)


class RecordingClient:
    """An `acp.Client` that records the updates and answers permission requests from a script.

    Each permission request takes the next scripted answer: an option id to select, or None
    for the "cancelled" outcome.
    """

    def __init__(self, *answers: str | None) -> None:
        self.updates: list[tuple[str, Update]] = []
        self.permission_requests: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self._answers: deque[str | None] = deque(answers)
        self._arrived = asyncio.Event()

    def messages(self, session_id: str) -> list[str]:
        """The text of the agent message chunks of a session, in order of arrival."""
        return [
            update.content.text
            for sid, update in self.updates
            if sid == session_id
            and isinstance(update, AgentMessageChunk)
            and isinstance(update.content, TextContentBlock)
        ]

    def of_type(self, kind: type[U]) -> list[U]:
        """The updates of one type, of any session, in order of arrival."""
        return [update for _, update in self.updates if isinstance(update, kind)]

    async def wait_for(self, predicate: Callable[[Update], bool]) -> Update:
        """The first update (arrived or to come) that satisfies `predicate`."""
        while True:
            for _, update in self.updates:
                if predicate(update):
                    return update
            self._arrived.clear()
            await self._arrived.wait()

    async def session_update(self, session_id: str, update: Update, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._arrived.set()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.permission_requests.append((tool_call, options))
        choice = self._answers.popleft()
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    # The rest of `acp.Client`: the fake never asks for these.

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        raise RequestError.method_not_found("terminal/kill")

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Agent) -> None:
        return None


@asynccontextmanager
async def fake_agent(
    client: RecordingClient, cwd: Path, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[ClientSideConnection, Process]]:
    """The fake as a child process with `cwd` as its working directory, killed on the way out."""
    async with spawn_agent_process(client, sys.executable, str(FAKE_AGENT), cwd=cwd, env=env) as (
        conn,
        process,
    ):
        try:
            yield conn, process
        finally:
            # Whatever the test left it in (wedged, silent), no fake outlives its test.
            if process.returncode is None:
                process.kill()
                await process.wait()


async def open_session(conn: ClientSideConnection, cwd: Path) -> str:
    await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), TIMEOUT)
    session = await asyncio.wait_for(conn.new_session(cwd=str(cwd)), TIMEOUT)
    return session.session_id


def start_prompt(
    conn: ClientSideConnection, session_id: str, text: str
) -> asyncio.Task[PromptResponse]:
    """A prompt left running, for the turns that are not meant to end by themselves."""
    return asyncio.create_task(conn.prompt(session_id=session_id, prompt=[text_block(text)]))


async def turn(
    conn: ClientSideConnection, client: RecordingClient, session_id: str, text: str
) -> tuple[str, str]:
    """One prompt: its stop reason and the agent's reply (its message chunks joined)."""
    client.updates.clear()
    response = await asyncio.wait_for(
        conn.prompt(session_id=session_id, prompt=[text_block(text)]), TIMEOUT
    )
    return response.stop_reason, "".join(client.messages(session_id))


async def close_stdin_and_exit(process: Process) -> tuple[int, str]:
    """Close the fake's stdin as a leaving client does: its exit status and its stderr."""
    assert process.stdin is not None and process.stderr is not None
    process.stdin.write_eof()
    status = await asyncio.wait_for(process.wait(), TIMEOUT)
    stderr = await asyncio.wait_for(process.stderr.read(), TIMEOUT)
    return status, stderr.decode()


class ParseErrorSignal(logging.Handler):
    """Set when the SDK's reader logs a line it could not parse as JSON."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.seen = asyncio.Event()
        self.errors: list[BaseException | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "Error parsing JSON-RPC message":
            self.errors.append(record.exc_info[1] if record.exc_info else None)
            self.seen.set()


async def test_initialize_then_an_echo_turn_streams_everything(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, process):
        init = await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), TIMEOUT)
        assert init.protocol_version == PROTOCOL_VERSION
        assert init.agent_info is not None
        assert (init.agent_info.name, init.agent_info.version) == ("fake-acp", "1.2.3")
        assert init.agent_capabilities is not None
        assert init.agent_capabilities.load_session is True
        session_id = (
            await asyncio.wait_for(conn.new_session(cwd=str(tmp_path)), TIMEOUT)
        ).session_id

        stop_reason, reply = await turn(conn, client, session_id, "hi")

        assert stop_reason == "end_turn"
        assert client.messages(session_id) == ["echo", ": hi"]
        assert reply == "echo: hi"
        assert {sid for sid, _ in client.updates} == {session_id}
        [plan] = client.of_type(AgentPlanUpdate)
        assert [entry.status for entry in plan.entries] == ["completed", "in_progress"]
        [start] = client.of_type(ToolCallStart)
        assert (start.kind, start.title) == ("think", "thinking")
        [done] = client.of_type(ToolCallProgress)
        assert (done.tool_call_id, done.status) == (start.tool_call_id, "completed")
        [usage] = client.of_type(UsageUpdate)
        assert usage.used == len("hi") and usage.size > usage.used
        # A client that leaves (stdin closed) ends the fake cleanly.
        assert await close_stdin_and_exit(process) == (0, "")


async def test_notes_last_across_turns_and_a_new_process_loads_the_session(
    tmp_path: Path,
) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, _):
        session_id = await open_session(conn, tmp_path)
        assert await turn(conn, client, session_id, "remember the cat is black") == (
            "end_turn",
            "noted",
        )
        assert await turn(conn, client, session_id, "REMEMBER milk") == ("end_turn", "noted")
        assert await turn(conn, client, session_id, "recall") == (
            "end_turn",
            "you said: the cat is black; milk",
        )
    saved = json.loads((tmp_path / ".fake-acp-sessions.json").read_text(encoding="utf-8"))
    assert saved[session_id] == ["the cat is black", "milk"]

    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, _):
        await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), TIMEOUT)
        with pytest.raises(RequestError) as unknown:
            await asyncio.wait_for(
                conn.load_session(cwd=str(tmp_path), session_id="sess-unknown"), TIMEOUT
            )
        assert unknown.value.code == -32002  # "Resource not found"
        await asyncio.wait_for(conn.load_session(cwd=str(tmp_path), session_id=session_id), TIMEOUT)
        assert await turn(conn, client, session_id, "remember eggs") == ("end_turn", "noted")
        assert await turn(conn, client, session_id, "recall") == (
            "end_turn",
            "you said: the cat is black; milk; eggs",
        )


async def test_write_and_run_wait_for_permission(tmp_path: Path) -> None:
    client = RecordingClient("allow-once", "reject-once", None, "allow-always", "reject-always")
    (tmp_path / "old.txt").write_text("before", encoding="utf-8")
    async with fake_agent(client, tmp_path) as (conn, _):
        session_id = await open_session(conn, tmp_path)

        assert await turn(conn, client, session_id, "write old.txt after the edit") == (
            "end_turn",
            "wrote old.txt",
        )
        assert (tmp_path / "old.txt").read_text(encoding="utf-8") == "after the edit"
        [start] = client.of_type(ToolCallStart)
        assert (start.kind, start.title) == ("edit", "Write old.txt")
        assert [location.path for location in start.locations or []] == [str(tmp_path / "old.txt")]
        [diff] = start.content or []
        assert isinstance(diff, FileEditToolCallContent)
        assert (diff.old_text, diff.new_text) == ("before", "after the edit")
        [done] = client.of_type(ToolCallProgress)
        assert (done.tool_call_id, done.status) == (start.tool_call_id, "completed")
        asked, options = client.permission_requests[-1]
        assert (asked.tool_call_id, asked.kind) == (start.tool_call_id, "edit")
        assert [(option.option_id, option.kind) for option in options] == [
            ("allow-once", "allow_once"),
            ("allow-always", "allow_always"),
            ("reject-once", "reject_once"),
            ("reject-always", "reject_always"),
        ]

        # Rejected, then the permission request cancelled: no file either time.
        for name in ("rejected.txt", "cancelled.txt"):
            assert await turn(conn, client, session_id, f"write {name} nope") == (
                "end_turn",
                f"not allowed to write {name}",
            )
            assert not (tmp_path / name).exists()
            [failed] = client.of_type(ToolCallProgress)
            assert failed.status == "failed"

        # `run` asks the same way, and runs the command only when allowed.
        assert await turn(conn, client, session_id, "run touch ran.txt") == (
            "end_turn",
            "ran touch ran.txt",
        )
        assert (tmp_path / "ran.txt").exists()
        [start] = client.of_type(ToolCallStart)
        assert (start.kind, start.title) == ("execute", "touch ran.txt")
        assert start.raw_input == {"command": "touch ran.txt"}
        assert client.permission_requests[-1][0].raw_input == {"command": "touch ran.txt"}
        assert await turn(conn, client, session_id, "run touch refused.txt") == (
            "end_turn",
            "not allowed to run touch refused.txt",
        )
        assert not (tmp_path / "refused.txt").exists()
        assert len(client.permission_requests) == 5


async def test_slow_turn_ends_cancelled_when_the_client_cancels(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, _):
        session_id = await open_session(conn, tmp_path)
        prompt = start_prompt(conn, session_id, "slow")

        await asyncio.wait_for(client.wait_for(lambda u: isinstance(u, AgentMessageChunk)), TIMEOUT)
        assert client.messages(session_id) == ["working…"]
        assert not prompt.done()
        await conn.cancel(session_id=session_id)

        response = await asyncio.wait_for(prompt, TIMEOUT)
        assert response.stop_reason == "cancelled"


async def test_crash_exits_3_and_fails_the_pending_prompt(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, process):
        session_id = await open_session(conn, tmp_path)

        # The SDK fails every pending request with ConnectionError when stdout closes.
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text_block("crash")]), TIMEOUT
            )

        assert client.messages(session_id) == ["about to crash"]
        assert await asyncio.wait_for(process.wait(), TIMEOUT) == 3
        assert process.stderr is not None
        stderr = await asyncio.wait_for(process.stderr.read(), TIMEOUT)
        assert "fake-acp: crashing on purpose" in stderr.decode()


async def test_malformed_line_is_skipped_by_the_sdk_and_the_prompt_never_answers(
    tmp_path: Path,
) -> None:
    client = RecordingClient()
    parse_errors = ParseErrorSignal()
    logging.getLogger().addHandler(parse_errors)
    try:
        async with fake_agent(client, tmp_path) as (conn, _):
            session_id = await open_session(conn, tmp_path)
            prompt = start_prompt(conn, session_id, "malformed")
            try:
                await asyncio.wait_for(parse_errors.seen.wait(), TIMEOUT)
                assert isinstance(parse_errors.errors[0], json.JSONDecodeError)
                # Silence is the behaviour: after the bad line, no answer ever comes.
                done, _ = await asyncio.wait({prompt}, timeout=SILENCE)
                assert not done
                # The SDK logged the line, dropped it and kept reading: the link still works.
                other = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path)), TIMEOUT)
                assert other.session_id != session_id
            finally:
                prompt.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await prompt
    finally:
        logging.getLogger().removeHandler(parse_errors)


async def test_empty_turn_has_no_message_and_explains_on_stderr(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, process):
        session_id = await open_session(conn, tmp_path)

        assert await turn(conn, client, session_id, "empty") == ("end_turn", "")
        assert client.updates == []

        status, stderr = await close_stdin_and_exit(process)
        assert status == 0
        assert "fake-acp: auth failed: token expired" in stderr


async def test_silent_init_never_answers_initialize(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path, env={"FAKE_ACP_SILENT_INIT": "1"}) as (
        conn,
        process,
    ):
        # The process's start-up is inside the window too: a fake that answers does so in ms.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), SILENCE)
        assert process.returncode is None


async def test_hang_ignores_cancel_and_stdin_closing_until_killed(tmp_path: Path) -> None:
    client = RecordingClient()
    async with fake_agent(client, tmp_path) as (conn, process):
        session_id = await open_session(conn, tmp_path)
        prompt = start_prompt(conn, session_id, "hang")
        await conn.cancel(session_id=session_id)
        assert process.stdin is not None
        process.stdin.write_eof()
        exited = asyncio.create_task(process.wait())

        # Silence is the behaviour: neither an answer nor an exit, cancel and EOF notwithstanding.
        done, _ = await asyncio.wait({prompt, exited}, timeout=SILENCE)
        assert not done

        process.kill()
        assert await asyncio.wait_for(exited, TIMEOUT) == -signal.SIGKILL
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(prompt, TIMEOUT)
