"""A loopback ACP agent for tests: `python tests/fakes/acp_agent.py` serves ACP over stdio.

It is built on the SDK's agent side only (`acp.run_agent`), so a client under test talks to
the real protocol implementation, and it needs nothing but the standard library and `acp`
(it runs inside the sandbox with the bot's interpreter, its cwd the session's workspace).

Each `session/prompt` picks a behaviour by the first word of its first line (the prompt's
text blocks joined by newlines; later lines are the context the bot appends), case-insensitively:

- `remember <words>` keeps <words> in the session's notes and replies "noted";
  `recall` replies "you said: " and the notes joined by "; ". The notes are saved after each
  turn in `.fake-acp-sessions.json` in the session's cwd, where `session/load` (even in
  another process) finds them.
- `write <file> <content...>` shows an edit tool call with a diff, asks permission, and
  writes the file (relative to the session's cwd) only if an "allow" option was chosen.
- `run <command...>` shows an execute tool call, asks permission, and runs it (`sh -c`, in
  the session's cwd) only if allowed.
- `read <path> [line] [limit]` asks the client for the file (`fs/read_text_file`) and replies
  "read: <content>", or "read refused: <the client's message>"; "client cannot read files"
  when the client did not offer reads at `initialize`.
- `model` replies "model: <name>", the session's model option (`small` unless the client
  set it to `large` with `session/set_config_option`).
- `mcp-servers` replies "mcp servers: " and the session's MCP servers (from `session/new` or
  the last `session/load`) as JSON: name, type, url and header names (never their values);
  "mcp servers: none" when it got none.
- `call-mcp <server> <tool> [json arguments]` connects to the session's HTTP MCP server
  <server> with the `mcp` SDK's client (sending the headers it was given), calls <tool> and
  replies "mcp result: <text>", "mcp error: <text>" (the tool's error result) or
  "mcp failed: <why>" (no such server, or the connection failed).
- `slow` sends "working…" and ends with stop reason "cancelled" once `session/cancel` comes.
- `crash` sends "about to crash", says why on stderr and exits with status 3 mid-turn.
- `malformed` writes a line that is not JSON to stdout, then never answers.
- `empty` says "auth failed" on stderr and ends the turn without a word.
- `hang` never answers, ignores `session/cancel` and outlives its stdin: it must be killed.
- anything else: "echo: <text>" in two chunks, with a plan, a "think" tool call and usage.

`FAKE_ACP_SILENT_INIT=1` in the environment makes it never answer `initialize`;
`FAKE_ACP_NO_HTTP_MCP=1` makes it not advertise HTTP MCP servers (`mcpCapabilities.http`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from acp import (
    AGENT_METHODS,
    PROTOCOL_VERSION,
    Client,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AllowedOutcome,
    AudioContentBlock,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    SseMcpServer,
    StopReason,
    TextContentBlock,
    ToolCallLocation,
    ToolCallStart,
    ToolCallStatus,
    ToolCallUpdate,
    UsageUpdate,
)

AGENT_NAME = "fake-acp"
AGENT_VERSION = "1.2.3"
SESSIONS_FILE = ".fake-acp-sessions.json"
SILENT_INIT_VAR = "FAKE_ACP_SILENT_INIT"
NO_HTTP_MCP_VAR = "FAKE_ACP_NO_HTTP_MCP"
# What the usage update claims as the context window, in tokens.
CONTEXT_SIZE = 200_000

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)
McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


@dataclass
class _Session:
    """What the fake knows of one session."""

    cwd: Path
    notes: list[str] = field(default_factory=list)
    model: str = "small"
    # Replaced at the start of each turn, so a cancel only ends the turn it was meant for.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    tool_calls: int = 0
    mcp_servers: list[McpServer] = field(default_factory=list)

    def next_tool_call_id(self) -> str:
        self.tool_calls += 1
        return f"call-{self.tool_calls}"


Command = Callable[[str, _Session, str], Awaitable[StopReason]]


async def _wait_forever() -> NoReturn:
    """Park this task (not the event loop) until it is cancelled."""
    await asyncio.Event().wait()
    raise AssertionError("an event nobody sets was set")


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


MODELS = ("small", "large")


def _model_option(current: str) -> SessionConfigOptionSelect:
    """The session's one configuration option: which model it uses."""
    return SessionConfigOptionSelect(
        id="model",
        name="Model",
        category="model",
        type="select",
        current_value=current,
        options=[SessionConfigSelectOption(value=m, name=m) for m in MODELS],
    )


def _permission_options() -> list[PermissionOption]:
    return [
        PermissionOption(option_id="allow-once", name="Allow once", kind="allow_once"),
        PermissionOption(option_id="allow-always", name="Always allow", kind="allow_always"),
        PermissionOption(option_id="reject-once", name="Reject", kind="reject_once"),
        PermissionOption(option_id="reject-always", name="Always reject", kind="reject_always"),
    ]


def _read_notes(cwd: Path) -> dict[str, list[str]]:
    """Every session's notes saved in `cwd`, by session id."""
    try:
        data: object = json.loads((cwd / SESSIONS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(key): [str(note) for note in notes]
        for key, notes in data.items()
        if isinstance(notes, list)
    }


def _save_notes(cwd: Path, session_id: str, notes: list[str]) -> None:
    saved = _read_notes(cwd)
    saved[session_id] = list(notes)
    # Written aside then renamed: another process loading the session never reads half a file.
    partial = cwd / f"{SESSIONS_FILE}.{os.getpid()}.tmp"
    partial.write_text(json.dumps(saved, indent=2), encoding="utf-8")
    partial.replace(cwd / SESSIONS_FILE)


class FakeAgent:
    """The `acp.Agent` the script serves; the behaviours are in the module's docstring."""

    def __init__(self, *, silent_init: bool, http_mcp: bool = True) -> None:
        self._silent_init = silent_init
        self._http_mcp = http_mcp
        self._client: Client | None = None
        self._sessions: dict[str, _Session] = {}
        self._commands: dict[str, Command] = {
            "remember": self._remember,
            "recall": self._recall,
            "model": self._model,
            "write": self._write,
            "read": self._read,
            "run": self._run,
            "slow": self._slow,
            "crash": self._crash,
            "malformed": self._malformed,
            "empty": self._empty,
            "hang": self._hang,
            "mcp-servers": self._mcp_servers,
            "call-mcp": self._call_mcp,
        }
        # Set by `hang`: the script then outlives the connection (see `_serve`).
        self.wedged = False
        self._client_reads = False  # the client offered `fs/read_text_file`

    def on_connect(self, conn: Client) -> None:
        # `AgentSideConnection` hands itself over here: our way to talk to the client.
        self._client = conn

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the SDK did not connect the agent to a client")
        return self._client

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        if self._silent_init:
            await _wait_forever()
        fs = client_capabilities.fs if client_capabilities else None
        self._client_reads = bool(fs and fs.read_text_file)
        return InitializeResponse(
            # The client's version when the SDK speaks it, else the newest the SDK knows.
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True, mcp_capabilities=McpCapabilities(http=self._http_mcp)
            ),
            agent_info=Implementation(name=AGENT_NAME, version=AGENT_VERSION),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = f"sess-{uuid.uuid4().hex[:12]}"
        self._sessions[session_id] = _Session(cwd=Path(cwd), mcp_servers=list(mcp_servers or []))
        return NewSessionResponse(session_id=session_id, config_options=[_model_option("small")])

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        saved = _read_notes(Path(cwd))
        if session_id not in saved:
            raise RequestError.resource_not_found(session_id)
        self._sessions[session_id] = _Session(
            cwd=Path(cwd), notes=saved[session_id], mcp_servers=list(mcp_servers or [])
        )
        return LoadSessionResponse()

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        session.cancelled = asyncio.Event()
        text = "\n".join(block.text for block in prompt if isinstance(block, TextContentBlock))
        # The first line is the request; what the bot appends after it (memory, skills) is
        # context a real agent would read and this one ignores.
        text = text.strip().split("\n", 1)[0] if text.strip() else ""
        words = text.strip().split(maxsplit=1)
        command = self._commands.get(words[0].lower()) if words else None
        if command is None:
            stop_reason = await self._echo(session_id, session, text)
        else:
            stop_reason = await command(session_id, session, words[1] if len(words) > 1 else "")
        _save_notes(session.cwd, session_id, session.notes)
        return PromptResponse(stop_reason=stop_reason)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    # The behaviours, one per first word of the prompt.

    async def _say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, update_agent_message_text(text))

    async def _echo(self, session_id: str, session: _Session, text: str) -> StopReason:
        plan = update_plan(
            [
                plan_entry("read the prompt", status="completed"),
                plan_entry("echo it back", status="in_progress"),
            ]
        )
        await self.client.session_update(session_id, plan)
        call_id = session.next_tool_call_id()
        thinking = start_tool_call(call_id, "thinking", kind="think", status="in_progress")
        await self.client.session_update(session_id, thinking)
        await self.client.session_update(session_id, update_tool_call(call_id, status="completed"))
        reply = f"echo: {text}"
        half = len(reply) // 2
        await self._say(session_id, reply[:half])
        await self._say(session_id, reply[half:])
        usage = UsageUpdate(session_update="usage_update", used=len(text), size=CONTEXT_SIZE)
        await self.client.session_update(session_id, usage)
        return "end_turn"

    async def _remember(self, session_id: str, session: _Session, words: str) -> StopReason:
        if words:
            session.notes.append(words)
        await self._say(session_id, "noted")
        return "end_turn"

    async def _model(self, session_id: str, session: _Session, _: str) -> StopReason:
        await self._say(session_id, f"model: {session.model}")
        return "end_turn"

    async def _recall(self, session_id: str, session: _Session, _: str) -> StopReason:
        await self._say(session_id, "you said: " + "; ".join(session.notes))
        return "end_turn"

    async def _write(self, session_id: str, session: _Session, args: str) -> StopReason:
        name, _, content = args.partition(" ")
        if not name:
            await self._say(session_id, "usage: write <file> <content>")
            return "end_turn"
        target = session.cwd / name
        old_text = target.read_text(encoding="utf-8") if target.is_file() else None
        call = start_tool_call(
            session.next_tool_call_id(),
            f"Write {name}",
            kind="edit",
            status="pending",
            locations=[ToolCallLocation(path=str(target))],
            content=[tool_diff_content(str(target), content, old_text)],
            raw_input={"path": str(target), "content": content},
        )
        if await self._allowed(session_id, call):
            target.write_text(content, encoding="utf-8")
            await self._finish(session_id, call, "completed", f"wrote {name}")
        else:
            await self._finish(session_id, call, "failed", f"not allowed to write {name}")
        return "end_turn"

    async def _read(self, session_id: str, session: _Session, args: str) -> StopReason:
        if not self._client_reads:
            await self._say(session_id, "client cannot read files")
            return "end_turn"
        path, *numbers = args.split()
        line, limit = (int(n) for n in [*numbers, "0", "0"][:2])
        try:
            answer = await self.client.read_text_file(
                session_id=session_id, path=path, line=line or None, limit=limit or None
            )
        except RequestError as refused:
            await self._say(session_id, f"read refused: {refused}")
            return "end_turn"
        await self._say(session_id, f"read: {answer.content}")
        return "end_turn"

    async def _run(self, session_id: str, session: _Session, command: str) -> StopReason:
        call = start_tool_call(
            session.next_tool_call_id(),
            command,
            kind="execute",
            status="pending",
            content=[tool_content(text_block(command))],
            raw_input={"command": command},
        )
        # Run only once allowed, in the session's cwd, as a coding agent's own tool would.
        if await self._allowed(session_id, call):
            done = await asyncio.create_subprocess_shell(command, cwd=session.cwd)
            await done.wait()
            await self._finish(session_id, call, "completed", f"ran {command}")
        else:
            await self._finish(session_id, call, "failed", f"not allowed to run {command}")
        return "end_turn"

    async def _allowed(self, session_id: str, call: ToolCallStart) -> bool:
        """Show the tool call and ask the client; True when an "allow" option was chosen."""
        await self.client.session_update(session_id, call)
        options = _permission_options()
        request = ToolCallUpdate(
            tool_call_id=call.tool_call_id,
            title=call.title,
            kind=call.kind,
            status=call.status,
            content=call.content,
            locations=call.locations,
            raw_input=call.raw_input,
        )
        response = await self.client.request_permission(session_id, request, options)
        # The other outcome, `DeniedOutcome` ("cancelled"), means the turn was cancelled.
        if not isinstance(response.outcome, AllowedOutcome):
            return False
        kinds = {option.option_id: option.kind for option in options}
        return kinds.get(response.outcome.option_id, "").startswith("allow")

    async def _finish(
        self, session_id: str, call: ToolCallStart, status: ToolCallStatus, reply: str
    ) -> None:
        done = update_tool_call(call.tool_call_id, status=status)
        await self.client.session_update(session_id, done)
        await self._say(session_id, reply)

    async def _mcp_servers(self, session_id: str, session: _Session, _: str) -> StopReason:
        if not session.mcp_servers:
            await self._say(session_id, "mcp servers: none")
            return "end_turn"
        described = [
            {
                "name": server.name,
                "type": getattr(server, "type", "stdio"),
                "url": getattr(server, "url", ""),
                "headers": [header.name for header in getattr(server, "headers", [])],
            }
            for server in session.mcp_servers
        ]
        await self._say(session_id, "mcp servers: " + json.dumps(described))
        return "end_turn"

    async def _call_mcp(self, session_id: str, session: _Session, args: str) -> StopReason:
        name, tool, arguments = [*args.split(maxsplit=2), "", ""][:3]
        server = next(
            (s for s in session.mcp_servers if isinstance(s, HttpMcpServer) and s.name == name),
            None,
        )
        if server is None:
            await self._say(session_id, f"mcp failed: no HTTP MCP server {name!r}")
            return "end_turn"
        try:
            reply = await _call_http_tool(server, tool, json.loads(arguments or "{}"))
        except Exception as exc:  # the agent reports what went wrong, as a real one would
            reply = f"mcp failed: {type(exc).__name__}: {exc}"
        await self._say(session_id, reply)
        return "end_turn"

    async def _slow(self, session_id: str, session: _Session, _: str) -> StopReason:
        await self._say(session_id, "working…")
        await session.cancelled.wait()
        return "cancelled"

    async def _crash(self, session_id: str, session: _Session, _: str) -> StopReason:
        await self._say(session_id, "about to crash")
        _say_on_stderr("fake-acp: crashing on purpose")
        os._exit(3)

    async def _malformed(self, session_id: str, session: _Session, _: str) -> StopReason:
        # Around the SDK, on purpose: the client must cope with a line that is not JSON-RPC.
        sys.stdout.buffer.write(b"this is not json\n")
        sys.stdout.buffer.flush()
        await _wait_forever()

    async def _empty(self, session_id: str, session: _Session, _: str) -> StopReason:
        _say_on_stderr("fake-acp: auth failed: token expired")
        return "end_turn"

    async def _hang(self, session_id: str, session: _Session, _: str) -> StopReason:
        self.wedged = True
        await _wait_forever()

    # The rest of `acp.Agent`, which the fake does not offer.

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_list"])

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_set_mode"])

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        session = self._sessions.get(session_id)
        if session is None or config_id != "model" or value not in MODELS:
            raise RequestError.invalid_params({"config_id": config_id, "value": value})
        session.model = str(value)
        return SetSessionConfigOptionResponse(config_options=[_model_option(session.model)])

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["authenticate"])

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_fork"])

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_resume"])

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_close"])

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def _call_http_tool(server: HttpMcpServer, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call on `server` with the SDK's client, as an agent's MCP client makes it."""
    # Imported here: only this behaviour needs the MCP SDK.
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import TextContent

    headers = {header.name: header.value for header in server.headers}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(server.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as mcp,
    ):
        await mcp.initialize()
        result = await mcp.call_tool(tool, arguments)
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    return f"mcp {'error' if result.is_error else 'result'}: {text}"


async def _serve() -> None:
    agent = FakeAgent(
        silent_init=os.environ.get(SILENT_INIT_VAR) == "1",
        http_mcp=os.environ.get(NO_HTTP_MCP_VAR) != "1",
    )
    # Returns when stdin closes; the SDK then cancels the turns still running.
    await run_agent(agent)
    if agent.wedged:
        # A wedged agent does not notice its client leaving: only a signal ends it.
        await _wait_forever()


def main() -> None:
    asyncio.run(_serve())


if __name__ == "__main__":
    main()
