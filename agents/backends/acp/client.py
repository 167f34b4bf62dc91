"""The client side the agent talks to: session updates, permission requests and file reads
go to the turn running in that session. File reads are offered so the agent can open the run
records its prompt names, which live outside its sandbox; writes and terminals are refused
(the agent uses its own tools, inside the sandbox).

Every permission request gets an answer, whatever happens: an agent left waiting (or sent an
error, which codex-acp takes as a cancel of the whole turn) would hang or lose the turn.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from acp import CreateElicitationResponse, RequestError
from acp.schema import (
    AllowedOutcome,
    CreateTerminalResponse,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from agents.workspace_tools import WorkspaceError

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602  # JSON-RPC's code for a request the client cannot carry out as asked


class SessionSink(Protocol):
    """What one running turn does with its session's traffic."""

    async def update(self, update: Any) -> None:
        """Take in one `session/update`."""
        ...

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """Answer one `session/request_permission`."""
        ...

    async def read_text(self, path: str, line: int | None, limit: int | None) -> str:
        """Answer one `fs/read_text_file`; WorkspaceError with what the agent is told if not."""
        ...


def rejected(options: list[PermissionOption]) -> RequestPermissionResponse:
    """A no: the agent's reject-once option, else any reject, else a cancelled request."""
    for kinds in (("reject_once",), ("reject_once", "reject_always")):
        for option in options:
            if option.kind in kinds:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(option_id=option.option_id, outcome="selected")
                )
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def allowed(options: list[PermissionOption]) -> RequestPermissionResponse:
    """A yes for this one call: allow-once, else (the only yes offered) allow-always."""
    for kind in ("allow_once", "allow_always"):
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(option_id=option.option_id, outcome="selected")
                )
    return rejected(options)  # no yes offered: the call cannot be allowed


class RavenClient:
    """The `acp.Client` of one agent process, shared by its sessions."""

    def __init__(self) -> None:
        self._sinks: dict[str, SessionSink] = {}

    def attach(self, session_id: str, sink: SessionSink) -> None:
        self._sinks[session_id] = sink

    def detach(self, session_id: str) -> None:
        self._sinks.pop(session_id, None)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        sink = self._sinks.get(session_id)
        if sink is None:
            log.warning("acp: a permission request for idle session %s: rejected", session_id)
            return rejected(options)
        try:
            return await sink.permission(tool_call, options)
        except Exception:
            log.exception("acp: deciding a permission request failed: rejected")
            return rejected(options)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        sink = self._sinks.get(session_id)
        if sink is None:
            return  # an update after its turn ended (or for a session no turn runs)
        try:
            await sink.update(update)
        except Exception:
            log.exception("acp: a session update could not be taken in")

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        sink = self._sinks.get(session_id)
        if sink is None:
            raise RequestError(INVALID_PARAMS, "no turn is running in this session")
        try:
            return ReadTextFileResponse(content=await sink.read_text(path, line, limit))
        except WorkspaceError as refused:  # outside, through a link, the gate said no…
            raise RequestError(INVALID_PARAMS, str(refused)) from None

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

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/kill")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None
