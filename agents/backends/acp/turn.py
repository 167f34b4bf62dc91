"""One prompt turn in an ACP session: what the agent streams (its words, tool calls and their
diffs, its plan), its permission requests, decided by the permission gate, and the files it
asks the bot to read (`fs/read_text_file`).

A request becomes a gate call as the bot's own tools are: `execute` is `run_shell` on the
command, `edit` is `edit_file` and `delete`/`move` are `write_file` on the path, `read` and
`search` are `read_file`/`search_files`; anything else is `acp_<kind>` on its title. The gate
applies the rules, remembered allows and the mode, and asks the requester where it must (an
unattended run cannot ask, so it denies). Its answer picks the agent's own option: allow once,
else reject once.
"""

from __future__ import annotations

import asyncio
import difflib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    FileEditToolCallContent,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from agents.backends.acp.client import allowed, rejected
from agents.backends.base import AgentTask, Progress
from agents.workspace_tools import WorkspaceError, read_text_within
from core.markdown import code_block

DIFF_CAP = 4000
TAIL_CHARS = 400
READ_CAP_BYTES = 8 * 1024 * 1024  # a file read through the bot (larger: the agent's own tools)


@dataclass
class ToolCallRecord:
    """One tool call as the transcript keeps it."""

    id: str
    title: str = ""
    kind: str = "other"
    status: str = "pending"
    raw_input: Any = None
    diffs: list[dict[str, str]] = field(default_factory=list)
    permission: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "type": "tool_call",
            "id": self.id,
            "title": self.title,
            "kind": self.kind,
            "status": self.status,
            "input": self.raw_input,
            "diffs": self.diffs,
            "permission": self.permission,
        }


class AcpTurn:
    """The `SessionSink` of one prompt: collects its stream, answers its permission requests."""

    def __init__(self, task: AgentTask) -> None:
        self._task = task
        self._words: list[str] = []
        # The end of what it said, for progress: kept as it streams, never rebuilt from all.
        self._tail = ""
        self._calls: dict[str, ToolCallRecord] = {}
        self._plan: list[tuple[str, str]] = []
        self._progress: Progress | None = task.on_progress

    @property
    def text(self) -> str:
        """What the agent said (its message chunks, joined)."""
        return "".join(self._words)

    def transcript(self) -> list[dict[str, Any]]:
        plan = [{"type": "plan", "entries": [[c, s] for c, s in self._plan]}] if self._plan else []
        return [*plan, *(call.as_json() for call in self._calls.values())]

    async def update(self, update: Any) -> None:
        if isinstance(update, AgentMessageChunk):
            if isinstance(update.content, TextContentBlock):
                self._words.append(update.content.text)
                self._tail = (self._tail + update.content.text)[-TAIL_CHARS:]
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            self._take_call(update)
        elif isinstance(update, AgentPlanUpdate):
            self._plan = [(entry.content, entry.status) for entry in update.entries]
        else:
            return  # thoughts, modes, commands, usage: nothing the node keeps
        if self._progress is not None:
            await self._progress(self.progress_line())

    def progress_line(self) -> str:
        """The plan, the current tool call and the last words, in one short text."""
        parts: list[str] = []
        if self._plan:
            done = sum(1 for _, status in self._plan if status == "completed")
            current = next((c for c, s in self._plan if s == "in_progress"), "")
            parts.append(f"plan {done}/{len(self._plan)}" + (f": {current}" if current else ""))
        running = [c for c in self._calls.values() if c.status in ("pending", "in_progress")]
        if running:
            parts.append(f"{running[-1].kind}: {running[-1].title}")
        words = " ".join(self._tail.split())
        if words:
            parts.append(f"“…{words[-120:]}”")
        return " · ".join(parts)

    def _take_call(self, update: ToolCallStart | ToolCallUpdate) -> ToolCallRecord:
        call = self._calls.setdefault(update.tool_call_id, ToolCallRecord(update.tool_call_id))
        call.title = update.title or call.title
        call.kind = update.kind or call.kind
        call.status = update.status or call.status
        if update.raw_input is not None:
            call.raw_input = update.raw_input
        for item in update.content or []:
            if isinstance(item, FileEditToolCallContent):
                call.diffs.append(
                    {
                        "path": item.path,
                        "old": (item.old_text or "")[:DIFF_CAP],
                        "new": item.new_text[:DIFF_CAP],
                    }
                )
        return call

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        call = self._take_call(tool_call)
        task = self._task
        tool, subject = gate_call(call, tool_call, task.workspace)
        if task.permit is not None:
            decision = await task.permit(tool, subject, shown_call(call))
            yes, why = decision.allowed, decision.reason
        elif task.approve is not None:
            yes = await task.approve(f"{tool}: {subject}")
            why = "the requester approved it" if yes else "the requester did not approve it"
        else:
            yes, why = False, "nobody can approve it here (an unattended run)"
        call.permission = f"{'allowed' if yes else 'rejected'}: {why}"
        return allowed(options) if yes else rejected(options)

    async def read_text(self, path: str, line: int | None, limit: int | None) -> str:
        """`fs/read_text_file`: a run record the task names (paper Eq. 32: outside the
        workspace, so the sandbox does not show it), served by that exact name; else a file
        of the workspace, passed by the gate as the bot's own `read_file` is and opened
        without following links, since the agent's process, running beside this read, may
        have planted one. Raises WorkspaceError with what the agent is told."""
        task = self._task
        if task.records is not None:
            record = await task.records.read(path)
            if record is not None:
                return lines_of(record, line, limit)
        subject = await asyncio.to_thread(_relative, path, task.workspace)
        if task.permit is not None:
            decision = await task.permit("read_file", subject, f"The agent reads `{subject}`")
            if not decision.allowed:
                raise WorkspaceError(f"Refused by the permission gate: {decision.reason}")
        text = await asyncio.to_thread(
            read_text_within, task.workspace, path, max_bytes=READ_CAP_BYTES
        )
        return lines_of(text, line, limit)


def lines_of(text: str, line: int | None, limit: int | None) -> str:
    """ACP's slice of a file: from 1-based `line` (default the first), at most `limit` lines."""
    if line is None and limit is None:
        return text
    start = max(line or 1, 1) - 1
    lines = text.splitlines(keepends=True)
    return "".join(lines[start : None if limit is None else start + max(limit, 0)])


def gate_call(call: ToolCallRecord, update: ToolCallUpdate, workspace: Path) -> tuple[str, str]:
    """The gate's (tool, subject) for an agent's tool call; a path inside the workspace is
    given relative to it, as the bot's own file tools give theirs (where it leads once links
    are resolved: a link out of the workspace is judged where it goes)."""
    paths = [location.path for location in update.locations or []]
    paths += [diff["path"] for diff in call.diffs]
    where = _relative(paths[0], workspace) if paths else call.title
    if call.kind == "execute":
        return "run_shell", _command(call.raw_input) or call.title
    if call.kind == "edit":
        return "edit_file", where
    if call.kind in ("delete", "move"):
        return "write_file", where
    if call.kind == "read":
        return "read_file", where
    if call.kind == "search":
        return "search_files", call.title
    return f"acp_{call.kind}", call.title


def _command(raw: Any) -> str:
    """The command of an `execute` call's input (`{"command": "…"}` or an argv list)."""
    value = raw.get("command") if isinstance(raw, dict) else raw
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return shlex.join(value)
    return value if isinstance(value, str) else ""


def _relative(path: str, workspace: Path) -> str:
    root = workspace.resolve()
    target = (root / path).resolve()  # an absolute `path` stays itself
    try:
        return target.relative_to(root).as_posix()
    except ValueError:
        return str(target)


def shown_call(call: ToolCallRecord) -> str:
    """The call for the person asked: its title and kind, and the command or the diff."""
    head = f"The agent's call: **{' '.join(call.title.split())[:200]}** ({call.kind})"
    if call.kind == "execute" and (command := _command(call.raw_input)):
        return f"{head}\n{code_block(command)}"
    diffs = [_diff(d) for d in call.diffs]
    return "\n".join([head, *(code_block(d) for d in diffs if d)])


def _diff(change: dict[str, str]) -> str:
    lines = difflib.unified_diff(
        change["old"].splitlines(),
        change["new"].splitlines(),
        fromfile=change["path"],
        tofile=change["path"],
        lineterm="",
    )
    return "\n".join(lines)[:DIFF_CAP]
