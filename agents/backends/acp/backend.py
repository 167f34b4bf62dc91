"""The `acp` backend: a node's task is one `session/prompt` to the agent's pooled process.

A stateful instance keeps its ACP session: the session id is the first message of the
instance's history, so the next node of the handle prompts the same session (after a
restart, `session/load` where the agent supports it; else a new session told the earlier
exchange). A stateless node gets a fresh session.

The team's tools granted to a node (`task.granted.endpoints`: loopback streamable-HTTP
endpoints the bot serves for this one task, every call passing its permission gate) are given
to the session as HTTP MCP servers. An agent that does not take HTTP MCP servers (its
`initialize` did not advertise `mcpCapabilities.http`), or that runs without network, fails
such a node with a note saying so rather than running it without the tools it was granted.
Since a session keeps the servers it was opened with and each task's endpoint lives only
for that task, a continuation that is granted tools loads its session again with this
task's endpoints (or opens a new one told the earlier exchange) instead of reusing it.

A turn that is stopped sends `session/cancel` and gets a few seconds to settle; one that does
not settle, or that times out, ends the agent's process group. A crash, a malformed frame,
an agent that never answers, or an empty turn (agents report an expired login that way)
fails the node with what the agent wrote on stderr, fenced: it is the agent's text, not ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace

from acp import RequestError, text_block
from acp.schema import (
    AcpMcpServer,
    HttpHeader,
    HttpMcpServer,
    McpServerStdio,
    NewSessionResponse,
    PromptResponse,
    SessionConfigOptionSelect,
    SseMcpServer,
)

from agents.backends.acp.process import AcpProcess, AgentStartError
from agents.backends.acp.processes import AcpProcesses
from agents.backends.acp.turn import AcpTurn
from agents.backends.base import (
    AgentOutcome,
    AgentTask,
    McpEndpoint,
    cap_output,
    failed,
    task_as_text,
)
from agents.models.types import Message, TextBlock, Usage
from agents.registry import AgentEntry
from agents.sandbox import SandboxUnavailable
from core.fence import fence, new_marker

SESSION_PREFIX = "[acp session "
# What `session/new` and `session/load` take as MCP servers (the bot only gives HTTP ones).
McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


class ModelUnavailable(RuntimeError):
    """The configured model cannot be chosen in this agent's sessions."""


SETTLE_SECONDS = 5.0
CLOSE_SECONDS = 2.0
# The exchanges an instance keeps besides its session id (the agent holds the session).
HISTORY_KEPT = 40


class AcpBackend:
    """Runs one ACP agent's tasks."""

    def __init__(
        self, entry: AgentEntry, processes: AcpProcesses, *, settle_seconds: float = SETTLE_SECONDS
    ) -> None:
        self._entry = entry
        self._processes = processes
        self._settle_seconds = settle_seconds

    async def run(self, task: AgentTask) -> AgentOutcome:
        started = time.monotonic()
        name = self._entry.name
        try:
            process = await self._processes.acquire(self._entry, task.workspace)
        except AgentStartError as exc:
            return failed(task, self._error(f"it did not start: {exc}", stderr=exc.stderr))
        except SandboxUnavailable as exc:
            return failed(task, f"The `{name}` agent did not run. {exc}")
        stopped = False
        try:
            return await self._prompt(process, task, started)
        except asyncio.CancelledError:
            stopped = True
            raise
        finally:
            self._processes.release(process, task.workspace)
            if stopped:
                # Once no other turn uses it, the agent's whole process group ends too, so
                # nothing it started (a server, a watcher) outlives the `stop`.
                await asyncio.shield(self._processes.discard_if_idle(process, task.workspace))

    async def _prompt(self, process: AcpProcess, task: AgentTask, started: float) -> AgentOutcome:
        entry = self._entry
        refused = self._tools_refused(process, task.granted.endpoints)
        if refused:
            return failed(task, refused, seconds=time.monotonic() - started)
        try:
            session_id, message_only = await self._session(process, task)
        except (ConnectionError, OSError, TimeoutError) as exc:
            return await self._broken(process, task, started, f"no session ({exc})")
        except ModelUnavailable as exc:
            return await self._broken(process, task, started, f"no session: {exc}")
        except Exception as exc:  # the agent's JSON-RPC error
            return await self._broken(process, task, started, "no session", answer=str(exc))
        turn = AcpTurn(task)
        process.client.attach(session_id, turn)
        earlier = _exchanges(task.history)
        text = task.message if message_only else task_as_text(replace(task, history=earlier))
        prompting = asyncio.create_task(
            process.conn.prompt(session_id=session_id, prompt=[text_block(text)]),
            name=f"acp-{entry.name}-prompt",
        )
        try:
            try:
                async with asyncio.timeout(entry.timeout_seconds):
                    response = await asyncio.shield(prompting)
            except TimeoutError:
                await self._settle(process, task, session_id, prompting)
                return failed(
                    task,
                    f"The `{entry.name}` agent did not finish within "
                    f"{entry.timeout_seconds:g} s; its turn was cancelled.",
                    seconds=time.monotonic() - started,
                )
            except asyncio.CancelledError:
                await asyncio.shield(self._settle(process, task, session_id, prompting))
                raise
            except (ConnectionError, OSError) as exc:
                return await self._broken(process, task, started, f"the connection ended ({exc})")
            except Exception as exc:  # the agent answered the prompt with an error
                return await self._broken(
                    process, task, started, "its turn failed", answer=str(exc)
                )
        finally:
            process.client.detach(session_id)
        if self._entry.stateful:
            process.sessions.add(session_id)
        else:
            await self._close_session(process, session_id)
        return self._outcome(process, task, turn, response, session_id, started)

    async def _close_session(self, process: AcpProcess, session_id: str) -> None:
        """A stateless node's session is not needed again: let the agent free it."""
        process.sessions.discard(session_id)
        if process.info.close_session:
            with contextlib.suppress(Exception):  # only memory is at stake
                async with asyncio.timeout(CLOSE_SECONDS):
                    await process.conn.close_session(session_id=session_id)

    async def _session(self, process: AcpProcess, task: AgentTask) -> tuple[str, bool]:
        """The session to prompt, and whether this message alone is sent (the session
        continues the instance's, or there is no earlier exchange to tell)."""
        kept = session_of(task.history) if self._entry.stateful else None
        cwd = str(task.workspace.resolve())
        servers = _mcp_servers(task.granted.endpoints)
        async with asyncio.timeout(self._entry.init_timeout_seconds):
            # A live session still points at the endpoints of the task that opened it (closed
            # since): one granted tools now is loaded again with this task's endpoints.
            if kept is not None and kept in process.sessions and not servers:
                return kept, True
            if kept is not None and process.info.load_session:
                with contextlib.suppress(Exception):  # gone on the agent's side: start anew
                    await process.conn.load_session(cwd=cwd, session_id=kept, mcp_servers=servers)
                    process.sessions.add(kept)
                    return kept, True
            created = await process.conn.new_session(cwd=cwd, mcp_servers=servers)
            if self._entry.mode:
                await process.conn.set_session_mode(
                    session_id=created.session_id, mode_id=self._entry.mode
                )
            if self._entry.model:
                await self._choose_model(process, created)
        return created.session_id, not task.history

    def _tools_refused(self, process: AcpProcess, endpoints: tuple[McpEndpoint, ...]) -> str:
        """Why this agent cannot be given the granted tools ("" when it can, or none are)."""
        if not endpoints:
            return ""
        name = self._entry.name
        granted = ", ".join(f"`{endpoint.name}`" for endpoint in endpoints)
        if not self._entry.network:
            why = (
                "it runs without network (`network = false`), so it cannot reach the bot's "
                "loopback endpoint for them"
            )
        elif not _takes_http_mcp(process):
            why = (
                "it does not take MCP servers over HTTP (its `initialize` did not advertise "
                "`mcpCapabilities.http`)"
            )
        else:
            return ""
        return (
            f"The `{name}` agent was granted the team's tools ({granted}) but cannot use them: "
            f"{why}. Run this node without them (no `[mcp ...]`, or `mcp = []` for "
            f"[agents.{name}]), or give it to an agent that can."
        )

    async def _choose_model(self, process: AcpProcess, created: NewSessionResponse) -> None:
        """Set the configured model through the session's model option (ACP has no other
        way); `ModelUnavailable` when the agent offers none."""
        model = self._entry.model
        for option in created.config_options or []:
            if isinstance(option, SessionConfigOptionSelect) and "model" in (
                option.id,
                option.category,
            ):
                assert model is not None
                try:
                    await process.conn.set_config_option(
                        config_id=option.id, session_id=created.session_id, value=model
                    )
                except RequestError as exc:
                    offered = ", ".join(
                        str(getattr(choice, "value", "")) for choice in option.options
                    )
                    raise ModelUnavailable(
                        f"the agent refused `model = {model!r}` ({exc}); it offers: {offered}"
                    ) from None
                return
        raise ModelUnavailable(
            f"the agent offers no model choice, so `model = {model!r}` cannot be set: remove "
            f"it from [agents.{self._entry.name}] and choose the model in the agent's own "
            "settings"
        )

    async def _settle(
        self,
        process: AcpProcess,
        task: AgentTask,
        session_id: str,
        prompting: asyncio.Task[PromptResponse],
    ) -> None:
        """Cancel the turn; an agent that does not end it within a few seconds is ended."""
        with contextlib.suppress(Exception):
            await process.conn.cancel(session_id=session_id)
        done, _ = await asyncio.wait({prompting}, timeout=self._settle_seconds)
        if not done:
            prompting.cancel()
            await asyncio.wait({prompting})
            await self._processes.discard(process, task.workspace)
        elif not prompting.cancelled():
            prompting.exception()  # retrieved: a failed settle is no unhandled error

    async def _broken(
        self, process: AcpProcess, task: AgentTask, started: float, what: str, answer: str = ""
    ) -> AgentOutcome:
        """A connection that failed: the process goes, and the node says why."""
        await process.wait_exit(1.0)  # an exit code, if the agent is ending
        why = process.failure() or what
        error = self._error(
            why, stderr=process.stderr_tail(), frame=process.malformed_frame, answer=answer
        )
        await self._processes.discard(process, task.workspace)
        return failed(task, error, seconds=time.monotonic() - started)

    def _error(self, why: str, *, stderr: str = "", frame: str = "", answer: str = "") -> str:
        """The node's error: why, then the agent's own words, each fenced (its text)."""
        name = self._entry.name
        text = f"The `{name}` agent failed: {why}."
        for words, what in (
            (answer, "What it answered"),
            (frame, "The frame"),
            (stderr, "What it wrote on stderr"),
        ):
            if words:
                source = f"{what.lower()} of the {name} agent"
                text += f"\n{what}:\n{fence(words, source=source, marker=new_marker())}"
        return text

    def _outcome(
        self,
        process: AcpProcess,
        task: AgentTask,
        turn: AcpTurn,
        response: PromptResponse,
        session_id: str,
        started: float,
    ) -> AgentOutcome:
        entry = self._entry
        output, truncated = cap_output(turn.text.strip(), entry.output_cap_chars)
        error = None
        if response.stop_reason == "end_turn" and not output:
            why = "it ended its turn with no answer (often an expired login)"
            error = self._error(why, stderr=process.stderr_tail())
        elif response.stop_reason in ("refusal", "cancelled"):
            error = f"The `{entry.name}` agent ended its turn: {response.stop_reason}."
        elif response.stop_reason in ("max_tokens", "max_turn_requests"):
            truncated = True
        usage = response.usage
        # The agent holds the session; the instance keeps its id and the last exchanges (told
        # to a new session when the old one cannot be loaded).
        kept = [
            *_exchanges(task.history),
            Message.user_text(task.message),
            Message.assistant_text(output or "(no answer)"),
        ][-HISTORY_KEPT:]
        history = [Message.user_text(f"{SESSION_PREFIX}{session_id}]"), *kept]
        return AgentOutcome(
            output=output,
            transcript=[
                {
                    "type": "acp",
                    "agent": process.info.name,
                    "version": process.info.version,
                    "session": session_id,
                    "stop_reason": response.stop_reason,
                },
                *turn.transcript(),
            ],
            usage=Usage(
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            ),
            model_calls=0,
            seconds=time.monotonic() - started,
            history=history,
            truncated=truncated,
            error=error,
        )


def _mcp_servers(endpoints: tuple[McpEndpoint, ...]) -> list[McpServer]:
    """The granted endpoints as the session's MCP servers (none granted: none given)."""
    return [
        HttpMcpServer(
            type="http",
            name=endpoint.name,
            url=endpoint.url,
            headers=[HttpHeader(name=key, value=value) for key, value in endpoint.headers],
        )
        for endpoint in endpoints
    ]


def _takes_http_mcp(process: AcpProcess) -> bool:
    """Whether the agent advertised `mcpCapabilities.http` at `initialize`."""
    return process.info.mcp_http


def _exchanges(history: list[Message]) -> list[Message]:
    """An instance's history without its session marker (which only ever comes first)."""
    return history[1:] if session_of(history) is not None else history


def session_of(history: list[Message]) -> str | None:
    """The ACP session an instance's history continues (its first message says it)."""
    if not history or not history[0].content:
        return None
    block = history[0].content[0]
    if history[0].role != "user" or not isinstance(block, TextBlock):
        return None
    text = block.text
    if text.startswith(SESSION_PREFIX) and text.endswith("]"):
        return text[len(SESSION_PREFIX) : -1]
    return None
