"""What every agent backend takes and returns: `AgentTask` in, `AgentOutcome` out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agents.models.types import Message, TextBlock, ToolCall, ToolResult, Usage
from agents.permissions import ToolTrust
from agents.registry import AgentEntry
from agents.tools import Tool
from agents.workspace_tools import Permission, RunRecords, ToolContext

Progress = Callable[[str], Awaitable[None]]
Ask = Callable[[str], Awaitable[str]]
# Asks the requester "run this exact command?"; True only when they approved it.
Approve = Callable[[str], Awaitable[bool]]


class Permit(Protocol):
    """The permission gate for one task: (tool, subject) → whether the call may run, and
    why; `detail` is shown to the person asked, when the gate asks (a diff, a command)."""

    async def __call__(
        self, tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
    ) -> Permission: ...


@dataclass(frozen=True)
class McpEndpoint:
    """A tool server an ACP agent's session may use: a loopback streamable-HTTP URL the bot
    serves for this one task (every call passes the task's permission gate), and the
    headers that authenticate the agent to it."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeToolset:
    """What a node gets beyond its agent's own tools: the team's tools (MCP) granted to it,
    as tools for an in-process loop and as endpoints for an ACP agent's session."""

    tools: tuple[Tool[ToolContext], ...] = ()
    endpoints: tuple[McpEndpoint, ...] = ()


class BackendUnavailable(RuntimeError):
    """An agent's backend cannot be built here (unsupported, disabled, missing key or role)."""


@dataclass
class AgentTask:
    """One unit of work for one agent instance (a graph node, or a direct delegation)."""

    node_id: str
    agent: AgentEntry
    prompt: str
    workspace: Path
    # Earlier session messages of a stateful instance; empty for a fresh one.
    history: list[Message] = field(default_factory=list)
    # A follow-up message for a continued node; sent instead of `prompt` when given.
    continuation: str | None = None
    on_progress: Progress | None = None
    # Lets the worker ask the requester a clarifying question; None when nobody can answer.
    ask: Ask | None = None
    # Lets a command-running agent get a command approved; None (nobody can approve) refuses.
    approve: Approve | None = None
    # The permission gate tool calls pass (shell, Python, writes); None: none configured.
    permit: Permit | None = None
    # Run records the prompt names by path (outside the workspace): served to in-process
    # agents' file tools; `readable` holds their folders, shown read-only to a sandboxed CLI.
    records: RunRecords | None = None
    readable: tuple[Path, ...] = ()
    # The team's tools (MCP) granted to this task, beyond the agent's own.
    granted: NodeToolset = field(default_factory=NodeToolset)

    @property
    def message(self) -> str:
        """The text this run sends: the continuation if there is one, else the prompt."""
        return self.continuation if self.continuation is not None else self.prompt


@dataclass
class AgentOutcome:
    """What an agent run produced, its accounting, and the session to keep for continuation."""

    output: str
    transcript: list[dict[str, Any]]
    usage: Usage
    model_calls: int
    seconds: float
    history: list[Message]
    truncated: bool = False
    offline: bool = False
    error: str | None = None
    # The command was not run because nobody approved it (the requester said no, or nobody
    # can be asked): not a failure of the agent, and nothing for a judge to weigh.
    not_approved: bool = False
    # Set when a fallback model answered, for the run report: "answered by the fallback
    # model X: Y was overloaded" (None: the configured model answered).
    fallback: str | None = None


class AgentBackend(Protocol):
    """Runs agent tasks on one kind of execution backend."""

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Run `task` to completion; failures come back in `AgentOutcome.error`, not raised."""
        ...


def failed(
    task: AgentTask, error: str, *, seconds: float = 0.0, not_approved: bool = False
) -> AgentOutcome:
    """An outcome for a run that produced nothing; the session is left as it was."""
    return AgentOutcome(
        output="",
        transcript=[{"type": "error", "text": error}],
        usage=Usage(),
        model_calls=0,
        seconds=seconds,
        history=list(task.history),
        error=error,
        not_approved=not_approved,
    )


def cap_output(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to `cap` characters, and whether it was cut."""
    if len(text) <= cap:
        return text, False
    return text[:cap] + f"\n…[output truncated at {cap} characters]", True


def message_text(message: Message) -> str:
    """A message's content as plain text (tool traffic summarised), for text-only backends."""
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCall):
            parts.append(f"[called tool {block.name}]")
        elif isinstance(block, ToolResult):
            parts.append(f"[tool result: {block.content[:500]}]")
    return "\n".join(parts)


def task_as_text(task: AgentTask) -> str:
    """The whole request as one text: earlier session (if any) then this message."""
    if not task.history:
        return task.message
    earlier = "\n\n".join(f"{m.role.upper()}:\n{message_text(m)}" for m in task.history)
    return f"Earlier in this session:\n\n{earlier}\n\nNow:\n{task.message}"
