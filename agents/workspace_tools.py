"""File and shell tools confined to an agent's workspace; one implementation for all specialists."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from pydantic import BaseModel, Field

from agents.process import describe_exit, run_process, scrub_env
from agents.sandbox import Refusing, Sandbox, SandboxUnavailable
from agents.secret_paths import SECRETS_WHAT, is_secret_path, secret_targets
from agents.tools import MAX_TOOL_OUTPUT_CHARS, Tool, ToolTrust
from core.secret_names import SecretNames

READ_CHUNK_CHARS: Final = 16_000
MAX_LIST_ENTRIES: Final = 500
SKIP_DIRS: Final = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache"})


class Permission(Protocol):
    """A permission decision as tools read it."""

    @property
    def allowed(self) -> bool:
        """May the call run?"""
        ...

    @property
    def reason(self) -> str:
        """Why (shown to the agent when refused)."""
        ...


class ToolPermit(Protocol):
    """The permission gate as tools call it: (tool, subject) → decision; `detail` is shown
    to the person asked, `trust` says how far a tool server's call is trusted (MCP)."""

    async def __call__(
        self, tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
    ) -> Permission: ...


class RunRecords(Protocol):
    """The run records an agent's task points at by path (upstream nodes' outputs and
    memory records, paper Eq. 32), served read-only: they live outside its workspace."""

    async def read(self, path: str) -> str | None:
        """The text of the record at `path` exactly as the task names it (None when the
        task names no record there)."""
        ...


@dataclass(frozen=True)
class ToolContext:
    """What workspace tools act on: the agent's workspace, who can answer questions, and
    the permission gate that shell, Python and every file tool pass."""

    workspace: Path
    # Asks the requester a clarifying question and returns the answer; None if nobody can.
    ask: Callable[[str], Awaitable[str]] | None = None
    # (tool, subject) → decision; None when no gate is configured (tests, the console demo).
    permit: ToolPermit | None = None
    # The records the task names by path outside the workspace; None: it names none.
    records: RunRecords | None = None

    async def refusal(self, tool: str, subject: str) -> str | None:
        """None when the gate lets the call run, else the text the agent gets instead."""
        if self.permit is None:
            return None
        decision = await self.permit(tool, subject)
        return None if decision.allowed else f"Refused by the permission gate: {decision.reason}"


class WorkspaceError(ValueError):
    """A path the tools refuse (outside the workspace, missing, wrong kind)."""


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """Resolve `path` (relative, or absolute inside the workspace) with symlinks followed.

    Raises `WorkspaceError` when the real location is outside the workspace.
    """
    root = workspace.resolve()
    target = (root / path).resolve()  # an absolute `path` replaces root here, then is checked
    if target != root and not target.is_relative_to(root):
        raise WorkspaceError(
            f"Refused: `{path}` is outside the workspace. Use paths relative to the workspace "
            "root (no `..`, no absolute paths elsewhere, no symlinks leading out)."
        )
    return target


def _display(workspace: Path, target: Path) -> str:
    rel = target.relative_to(workspace.resolve()).as_posix()
    return rel or "."


def _outside(path: str) -> WorkspaceError:
    return WorkspaceError(
        f"Refused: `{path}` is outside the workspace. Use paths relative to the workspace "
        "root (no `..`, no absolute paths elsewhere, no symlinks leading out)."
    )


def _locate(workspace: Path, path: str) -> tuple[Path, Path]:
    root = workspace.resolve()
    return root, (root / path).resolve()


async def gated_target(ctx: ToolContext, tool: str, path: str) -> Path | str:
    """Where `path` really is (symlinks followed) once the permission gate allowed `tool` on
    it, or the refusal text. The gate sees the resolved path, relative to the workspace, so
    its rules and secret checks judge the file that would be touched, not the name used.

    Raises `WorkspaceError` for a path outside the workspace; one that resolves to a secret
    goes to the gate first, so the attempt is refused by it and recorded.
    """
    root, target = await asyncio.to_thread(_locate, ctx.workspace, path)
    inside = target == root or target.is_relative_to(root)
    if inside:
        subject = target.relative_to(root).as_posix()
    elif ctx.permit is not None and is_secret_path(str(target)):
        subject = str(target)
    else:
        raise _outside(path)
    refused = await ctx.refusal(tool, subject)
    if refused is not None:
        return refused
    if not inside:
        raise _outside(path)
    return target


def read_bytes_nofollow(target: Path) -> bytes:
    """The file's bytes, refusing a symlink swapped in after the path was resolved."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise WorkspaceError(f"`{target.name}` cannot be read: {exc.strerror}.") from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def write_text_nofollow(target: Path, text: str, *, append: bool = False) -> None:
    """Write (or append) text, refusing a symlink swapped in after the path was resolved."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        raise WorkspaceError(f"`{target.name}` cannot be written: {exc.strerror}.") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_text_within(workspace: Path, path: str, *, max_bytes: int) -> str:
    """A text file of the workspace, reached without following any link.

    For a reader racing a sandboxed process that may plant or swap links (an ACP agent runs
    beside the bot): `..` is taken literally, each folder is opened with O_NOFOLLOW from the
    one before, so nothing the process did can lead the read out of the workspace. A link,
    a FIFO or a device is refused, not followed or waited on.
    """
    root = workspace.resolve()
    target = Path(os.path.normpath(root / path))
    if target == root or not target.is_relative_to(root):
        raise _outside(path)
    *folders, name = target.relative_to(root).parts
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    part = name
    try:
        for part in folders:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            inner = os.open(part, flags, dir_fd=folder)
            os.close(folder)
            folder = inner
        part = name
        # Non-blocking: a FIFO planted there is refused below instead of waited on.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        if _is_link(part, folder):
            raise WorkspaceError(
                f"`{path}` cannot be read: `{part}` is a link, and links are not followed "
                "here; read its target instead."
            ) from None
        raise WorkspaceError(f"`{path}` cannot be read: {exc.strerror}.") from None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"`{path}` is not a regular file.")
        if info.st_size > max_bytes:
            raise WorkspaceError(
                f"`{path}` is {info.st_size} bytes, over the {max_bytes} this reads; "
                "read it in parts with your own tools."
            )
        data = handle.read(max_bytes + 1)
    if b"\0" in data[:8192]:
        raise WorkspaceError(f"`{path}` is a binary file ({len(data)} bytes); not shown.")
    return data.decode(errors="replace")


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


# -- file tools ------------------------------------------------------------------------------


class ReadFileInput(BaseModel):
    """Input of `read_file`."""

    path: str = Field(description="File path relative to the workspace root.")
    offset: int = Field(0, ge=0, description="Character offset to start at (for long files).")


class WriteFileInput(BaseModel):
    """Input of `write_file`."""

    path: str = Field(description="File path relative to the workspace root.")
    content: str = Field(description="The full text to write.")
    append: bool = Field(False, description="Append instead of replacing the file.")


class ListFilesInput(BaseModel):
    """Input of `list_files`."""

    path: str = Field(".", description="Directory relative to the workspace root.")
    recursive: bool = Field(False, description="List subdirectories too.")


async def read_file(ctx: ToolContext, args: ReadFileInput) -> str:
    """Read a text file from the workspace, or a run record the task names, a chunk at a
    time."""
    if ctx.records is not None:
        # Served from the bot's records by the exact name the task gave: nothing on disk is
        # opened by that name, so no link planted there can redirect the read. No gate: the
        # Host chose to show these records to this task, as it shows the text of its prompt.
        record = await ctx.records.read(args.path)
        if record is not None:
            return _chunk(record, args)
    target = await gated_target(ctx, "read_file", args.path)
    if isinstance(target, str):
        return target
    # File I/O runs in a thread so a large file never stalls the bot's event loop.
    return await asyncio.to_thread(_read_file, target, args)


def _read_file(target: Path, args: ReadFileInput) -> str:
    if not target.is_file():
        kind = "a directory" if target.is_dir() else "not found"
        raise WorkspaceError(f"`{args.path}` is {kind}; use list_files to see what exists.")
    data = read_bytes_nofollow(target)
    if b"\0" in data[:8192]:
        return f"`{args.path}` is a binary file ({len(data)} bytes); not shown."
    return _chunk(data.decode(errors="replace"), args)


def _chunk(text: str, args: ReadFileInput) -> str:
    chunk = text[args.offset : args.offset + READ_CHUNK_CHARS]
    end = args.offset + len(chunk)
    if end < len(text):
        chunk += f"\n…[{len(text) - end} more characters; call read_file with offset={end}]"
    return chunk


async def write_file(ctx: ToolContext, args: WriteFileInput) -> str:
    """Write (or append to) a text file in the workspace, creating parent directories."""
    target = await gated_target(ctx, "write_file", args.path)
    if isinstance(target, str):
        return target
    return await asyncio.to_thread(_write_file, ctx, target, args)


def _write_file(ctx: ToolContext, target: Path, args: WriteFileInput) -> str:
    if target.is_dir():
        raise WorkspaceError(f"`{args.path}` is a directory.")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_nofollow(target, args.content, append=args.append)
    verb = "appended" if args.append else "wrote"
    return f"{verb} {len(args.content)} characters to {_display(ctx.workspace, target)}"


async def list_files(ctx: ToolContext, args: ListFilesInput) -> str:
    """List a workspace directory (directories end with `/`, files show their size)."""
    base = await gated_target(ctx, "list_files", args.path)
    if isinstance(base, str):
        return base
    return await asyncio.to_thread(_list_files, ctx, base, args)


def _list_files(ctx: ToolContext, base: Path, args: ListFilesInput) -> str:
    if not base.is_dir():
        raise WorkspaceError(f"`{args.path}` is not a directory.")
    lines: list[str] = []
    for current, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        here = Path(current)
        for name in dirs:
            lines.append(_display(ctx.workspace, here / name) + "/")
        for name in sorted(files):
            path = here / name
            size = path.lstat().st_size
            lines.append(f"{_display(ctx.workspace, path)}  ({size} bytes)")
        if not args.recursive or len(lines) > MAX_LIST_ENTRIES:
            break
    if not lines:
        return f"`{args.path}` is empty."
    if len(lines) > MAX_LIST_ENTRIES:
        extra = len(lines) - MAX_LIST_ENTRIES
        lines = [*lines[:MAX_LIST_ENTRIES], f"…[{extra}+ more entries not shown]"]
    return "\n".join(sorted(lines) if args.recursive else lines)


READ_FILE: Final[Tool[ToolContext]] = Tool(
    "read_file",
    "Read a text file in the workspace (16k characters at a time; use `offset` for more).",
    ReadFileInput,
    read_file,
)
WRITE_FILE: Final[Tool[ToolContext]] = Tool(
    "write_file",
    "Create or overwrite (or append to) a text file in the workspace; parents are created.",
    WriteFileInput,
    write_file,
)
LIST_FILES: Final[Tool[ToolContext]] = Tool(
    "list_files",
    "List files and directories in the workspace (optionally recursive).",
    ListFilesInput,
    list_files,
)


class AskInput(BaseModel):
    """Input of `ask_requester`."""

    question: str = Field(description="One short, specific question for the requester.")


async def ask_requester(ctx: ToolContext, args: AskInput) -> str:
    """Ask the person who requested the task; their answer comes back as the result."""
    if ctx.ask is None:
        return "Nobody can answer questions for this task: proceed on stated assumptions."
    answer = await ctx.ask(args.question)
    return f"The requester answered: {answer}"


ASK_REQUESTER: Final[Tool[ToolContext]] = Tool(
    "ask_requester",
    "Ask the requester a clarifying question when the task is ambiguous and a wrong guess "
    "would waste real work; waits for their answer.",
    AskInput,
    ask_requester,
)


# -- shell -----------------------------------------------------------------------------------

# A command word in command position: line start, after a separator or quote, or after a
# wrapper like sudo/xargs. Matching only there keeps `echo reboot` or `git commit -m "mkfs"` legal.
_CMD = r"(?:^|[;&|(`\"'{]\s*|\$\(\s*|\b(?:sudo|exec|xargs|env|nohup|time|nice)\s+(?:-\S+\s+)*)"
_END = r"(?=$|[\s;&|)`\"'}])"
_SHELL = r"(?:ba|z|da|k|fi)?sh"

BUILTIN_DENY_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "deleting the filesystem root or a home directory",
        re.compile(
            _CMD + r"rm\s+(?:-{1,2}[\w-]+\s+)*(?:/|/\*|~|~/|~/\*|\$HOME/?|\$\{HOME\}/?)" + _END
        ),
    ),
    ("rm --no-preserve-root", re.compile(r"\brm\b.*--no-preserve-root")),
    ("formatting a filesystem (mkfs)", re.compile(_CMD + r"mkfs(?:\.\w+)?" + _END)),
    (
        "shutting down or rebooting the machine",
        re.compile(
            f"{_CMD}(?:shutdown|reboot|halt|poweroff){_END}|{_CMD}init\\s+[06]{_END}"
            r"|\bsystemctl\s+(?:poweroff|reboot|halt|kexec)\b"
        ),
    ),
    ("a fork bomb", re.compile(r"(\w+|:)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*\1\s*&")),
    (
        "piping a download into a shell",
        re.compile(
            rf"\b(?:curl|wget|fetch)\b[^;&]*\|\s*(?:sudo\s+)?(?:env\s+)?{_SHELL}{_END}"
            rf"|\b{_SHELL}\s+(?:-c\s+)?[\"']?(?:<\(|\$\()\s*(?:curl|wget)\b"
        ),
    ),
    (
        "writing to a raw disk device",
        re.compile(r"(?:\bof=|>\s*)/dev/(?:sd|hd|vd|xvd|nvme|disk|mmcblk)"),
    ),
    (
        "recursively changing permissions or ownership of /",
        re.compile(_CMD + r"(?:chmod|chown)\s+(?:\S+\s+)*-\w*R\w*\s+(?:\S+\s+)?/" + _END),
    ),
)


def denied_reason(command: str) -> str | None:
    """The builtin deny rule `command` breaks, or None; these are refused in every mode."""
    squeezed = " ".join(command.split())
    for description, pattern in BUILTIN_DENY_RULES:
        if pattern.search(squeezed):
            return description
    return None


@dataclass(frozen=True)
class ShellPolicy:
    """How `run_shell` runs: timeout, output cap, and extra environment names passed through."""

    # The settings' secret names (from the assembly root): never passed, even if allowed.
    secret_names: SecretNames = field(kw_only=True)
    timeout_seconds: float = 120.0
    output_cap_chars: int = MAX_TOOL_OUTPUT_CHARS - 500
    env_allow: tuple[str, ...] = ()
    environ: Mapping[str, str] | None = field(default=None, compare=False)
    shell: str = "/bin/sh"
    # Fail closed: a policy built without the assembly root's sandbox runs nothing.
    sandbox: Sandbox = field(default=Refusing("no sandbox was configured"), compare=False)


class RunShellInput(BaseModel):
    """Input of `run_shell`."""

    command: str = Field(description="A shell command line, run with /bin/sh -c in the workspace.")
    timeout_seconds: float | None = Field(
        None, gt=0, description="Stop it after this many seconds (at most the configured limit)."
    )


def shell_tool(policy: ShellPolicy) -> Tool[ToolContext]:
    """The `run_shell` tool under `policy` (workspace cwd, scrubbed env, timeout, output cap)."""

    async def run_shell(ctx: ToolContext, args: RunShellInput) -> str:
        reason = denied_reason(args.command)
        if reason is not None:
            return (
                f"Refused: this command looks like {reason}, which is never run here "
                "(builtin deny rule). Choose a safer command scoped to the workspace."
            )
        refused = await ctx.refusal("run_shell", args.command)
        if refused is not None:
            return refused
        workspace = await asyncio.to_thread(ctx.workspace.resolve)
        # The gate reads the text; here the words are resolved against the files they name
        # (a symlink to `.env`, a glob that matches one).
        reached = await asyncio.to_thread(secret_targets, args.command, workspace)
        if reached:
            return (
                f"Refused: `{reached[0]}` in this command is, or leads to, one of the bot's "
                f"secrets, and {SECRETS_WHAT} is never allowed here (builtin deny rule). "
                "Leave those files out of the command."
            )
        limit = policy.timeout_seconds
        timeout = min(args.timeout_seconds or limit, limit)
        environ = policy.environ if policy.environ is not None else os.environ
        try:
            result = await run_process(
                [policy.shell, "-c", args.command],
                cwd=workspace,
                env=scrub_env(environ, secret_names=policy.secret_names, allow=policy.env_allow),
                sandbox=policy.sandbox,
                timeout=timeout,
                output_cap=policy.output_cap_chars,
                merge_stderr=True,
            )
        except SandboxUnavailable as exc:
            return str(exc)
        header = describe_exit(result, what="The command", timeout=timeout)
        if header is None:
            header = "exit code 0"
        elif result.exit_code is not None and result.exit_code > 0 and not result.timed_out:
            header = f"exit code {result.exit_code}"
        note = "\n[output truncated: the middle was left out]" if result.truncated else ""
        return f"{header}\n{result.stdout}{note}" if result.stdout else f"{header}\n(no output)"

    return Tool(
        "run_shell",
        "Run a shell command in the workspace (e.g. build or run tests) with a timeout; "
        "returns the exit code and combined stdout/stderr. No secrets are in its environment.",
        RunShellInput,
        run_shell,
    )
