"""Workspace tools beyond read/write/list: exact-text edits, text search, a Python runner
(through the same sandboxed process path as `run_shell`) and an artifact check for design
work (SVG/HTML/JSON must parse; a screenshot with headless Chromium when one is installed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Final

from pydantic import BaseModel, Field

from agents.process import describe_exit, run_process, scrub_env
from agents.sandbox import SandboxUnavailable
from agents.secret_paths import is_secret_path
from agents.tools import Tool
from agents.workspace_tools import (
    SKIP_DIRS,
    ShellPolicy,
    ToolContext,
    WorkspaceError,
    gated_target,
    read_bytes_nofollow,
    resolve_in_workspace,
    write_text_nofollow,
)

MAX_SEARCH_MATCHES: Final = 200
MAX_SEARCH_FILE_BYTES: Final = 2_000_000
CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome", "headless_shell")
_IMPLICITLY_CLOSED: Final = frozenset(
    {"html", "head", "body", "p", "li", "td", "tr", "th", "option"}
)


# -- edit_file ---------------------------------------------------------------------------


class EditFileInput(BaseModel):
    """Input of `edit_file`."""

    path: str = Field(description="File path relative to the workspace root.")
    old: str = Field(min_length=1, description="The exact text to replace (must occur once).")
    new: str = Field(description="The replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of one.")


async def edit_file(ctx: ToolContext, args: EditFileInput) -> str:
    """Replace exact text in a workspace file (refused when it is missing or ambiguous)."""
    target = await gated_target(ctx, "edit_file", args.path)
    if isinstance(target, str):
        return target
    return await asyncio.to_thread(_edit_file, target, args)


def _edit_file(target: Path, args: EditFileInput) -> str:
    if not target.is_file():
        raise WorkspaceError(f"`{args.path}` does not exist; create it with write_file.")
    text = read_bytes_nofollow(target).decode("utf-8", errors="replace")
    count = text.count(args.old)
    if count == 0:
        raise WorkspaceError(
            f"The text to replace was not found in `{args.path}`; read the file again and "
            "copy the exact lines (whitespace included)."
        )
    if count > 1 and not args.replace_all:
        raise WorkspaceError(
            f"The text occurs {count} times in `{args.path}`; include more surrounding lines "
            "to make it unique, or set replace_all."
        )
    write_text_nofollow(target, text.replace(args.old, args.new))
    return f"replaced {count if args.replace_all else 1} occurrence(s) in {args.path}"


# -- search_files ------------------------------------------------------------------------


class SearchFilesInput(BaseModel):
    """Input of `search_files`."""

    pattern: str = Field(min_length=1, description="A regular expression (Python syntax).")
    path: str = Field(".", description="Directory (or file) to search, relative to the root.")
    glob: str = Field("*", description="Only files whose name matches, e.g. `*.py`.")


async def search_files(ctx: ToolContext, args: SearchFilesInput) -> str:
    """Lines matching a regular expression, as `path:line: text`."""
    try:
        pattern = re.compile(args.pattern)
    except re.error as exc:
        raise WorkspaceError(f"`{args.pattern}` is not a valid regular expression: {exc}") from None
    base = await gated_target(ctx, "search_files", args.path)
    if isinstance(base, str):
        return base
    return await asyncio.to_thread(_search, ctx, base, args, pattern)


def _search(ctx: ToolContext, base: Path, args: SearchFilesInput, pattern: re.Pattern[str]) -> str:
    root = ctx.workspace.resolve()
    matches: list[str] = []
    for file in _files(base, args.glob):
        try:
            real = file.resolve()
        except OSError:
            continue
        if not real.is_relative_to(root):  # a symlink leading out is never read
            continue
        if is_secret_path(real.relative_to(root).as_posix()):  # `.env` & co are never shown
            continue
        matches += _matches(real, root, pattern, MAX_SEARCH_MATCHES - len(matches))
        if len(matches) >= MAX_SEARCH_MATCHES:
            matches.append(f"…[stopped at {MAX_SEARCH_MATCHES} matches; narrow the search]")
            break
    return "\n".join(matches) if matches else f"No match for `{args.pattern}`."


def _files(base: Path, glob: str) -> list[Path]:
    if base.is_file():
        return [base]
    found: list[Path] = []
    for current, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        found += [Path(current) / f for f in sorted(files) if Path(f).match(glob)]
    return found


def _matches(file: Path, root: Path, pattern: re.Pattern[str], room: int) -> list[str]:
    try:
        if file.stat().st_size > MAX_SEARCH_FILE_BYTES:
            return []
        data = file.read_bytes()
    except OSError:
        return []
    if b"\0" in data[:8192]:
        return []  # binary
    rel = file.relative_to(root).as_posix()
    out = []
    for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
        if pattern.search(line):
            out.append(f"{rel}:{number}: {line[:300]}")
            if len(out) >= room:
                break
    return out


# -- run_python --------------------------------------------------------------------------


class RunPythonInput(BaseModel):
    """Input of `run_python`."""

    code: str = Field(min_length=1, description="A complete Python 3 program.")
    timeout_seconds: float | None = Field(None, gt=0, description="At most the configured limit.")


def python_tool(policy: ShellPolicy) -> Tool[ToolContext]:
    """`run_python`: the program is saved under `.raven/` in the workspace and run there with
    the same sandbox, scrubbed environment, timeout and output cap as `run_shell`."""

    async def run_python(ctx: ToolContext, args: RunPythonInput) -> str:
        refused = await ctx.refusal("run_python", args.code)
        if refused is not None:
            return refused
        workspace = await asyncio.to_thread(ctx.workspace.resolve)
        script = workspace / ".raven" / f"snippet_{uuid.uuid4().hex[:8]}.py"
        await asyncio.to_thread(_write_script, script, args.code)
        timeout = min(args.timeout_seconds or policy.timeout_seconds, policy.timeout_seconds)
        environ = policy.environ if policy.environ is not None else os.environ
        try:
            result = await run_process(
                ["python3", str(script.relative_to(workspace))],
                cwd=workspace,
                env=scrub_env(environ, secret_names=policy.secret_names, allow=policy.env_allow),
                sandbox=policy.sandbox,
                timeout=timeout,
                output_cap=policy.output_cap_chars,
                merge_stderr=True,
            )
        except (SandboxUnavailable, FileNotFoundError) as exc:
            return f"Could not run Python: {exc}"
        finally:
            await asyncio.to_thread(script.unlink, True)
        header = describe_exit(result, what="The program", timeout=timeout) or "exit code 0"
        return f"{header}\n{result.stdout or '(no output)'}"

    return Tool(
        "run_python",
        "Run a Python 3 program in the workspace (sandboxed, with a timeout, no secrets in "
        "its environment); returns the exit code and combined output.",
        RunPythonInput,
        run_python,
    )


def _write_script(path: Path, code: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code, encoding="utf-8")


# -- check_artifact ----------------------------------------------------------------------


class CheckArtifactInput(BaseModel):
    """Input of `check_artifact`."""

    path: str = Field(description="An .svg, .html/.htm or .json file in the workspace.")
    screenshot: bool = Field(True, description="Also render a PNG when Chromium is installed.")


class _HtmlChecker(HTMLParser):
    """Collects unbalanced tags: a cheap structural check, not a validator."""

    VOID: Final = frozenset(
        [
            "area",
            "base",
            "br",
            "col",
            "embed",
            "hr",
            "img",
            "input",
            "link",
            "meta",
            "param",
            "source",
            "track",
            "wbr",
        ]
    )

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Track an opened element."""
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        """Match a closing tag against the open ones."""
        if tag in self.VOID:
            return
        if tag not in self.stack:
            self.problems.append(f"</{tag}> closes nothing (line {self.getpos()[0]})")
            return
        while self.stack and self.stack[-1] != tag:
            left_open = self.stack.pop()
            if left_open not in _IMPLICITLY_CLOSED:
                self.problems.append(f"<{left_open}> is never closed")
        self.stack.pop()


def check_text(name: str, text: str) -> list[str]:
    """Problems found in an artifact's text ([] when it parses)."""
    suffix = Path(name).suffix.lower()
    if suffix == ".svg":
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            return [f"not well-formed XML: {exc}"]
        problems = [] if root.tag.endswith("svg") else [f"the root element is <{root.tag}>"]
        if "viewBox" not in root.attrib:
            problems.append("the <svg> element has no viewBox (it will not scale)")
        return problems
    if suffix in (".html", ".htm"):
        checker = _HtmlChecker()
        checker.feed(text)
        checker.close()
        # Elements HTML lets a document leave open are not problems.
        unclosed = [t for t in checker.stack if t not in _IMPLICITLY_CLOSED]
        return checker.problems + [f"<{tag}> is never closed" for tag in unclosed]
    if suffix == ".json":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            return [f"invalid JSON: {exc}"]
        return []
    return [f"cannot check `{suffix or name}` files: use .svg, .html or .json"]


def artifact_tool(policy: ShellPolicy) -> Tool[ToolContext]:
    """`check_artifact`: parse the file; render a screenshot in the sandbox if possible."""

    async def check_artifact(ctx: ToolContext, args: CheckArtifactInput) -> str:
        target = resolve_in_workspace(ctx.workspace, args.path)
        text = await asyncio.to_thread(_read_text, target, args.path)
        problems = check_text(args.path, text)
        verdict = (
            f"`{args.path}` parses cleanly."
            if not problems
            else f"`{args.path}` has problems:\n" + "\n".join(f"- {p}" for p in problems)
        )
        if not args.screenshot or Path(args.path).suffix.lower() == ".json":
            return verdict
        return f"{verdict}\n{await _screenshot(ctx, target, policy)}"

    return Tool(
        "check_artifact",
        "Check an SVG/HTML/JSON artifact in the workspace: it must parse (SVG needs a "
        "viewBox); also renders a PNG screenshot next to it when Chromium is available.",
        CheckArtifactInput,
        check_artifact,
    )


def _read_text(target: Path, shown: str) -> str:
    if not target.is_file():
        raise WorkspaceError(f"`{shown}` does not exist in the workspace.")
    return target.read_text(encoding="utf-8", errors="replace")


async def _screenshot(ctx: ToolContext, target: Path, policy: ShellPolicy) -> str:
    browser = next((b for b in CHROMIUM_NAMES if shutil.which(b)), None)
    if browser is None:
        return "(no screenshot: Chromium is not installed here)"
    workspace = await asyncio.to_thread(ctx.workspace.resolve)
    png = target.with_suffix(target.suffix + ".png")
    environ = policy.environ if policy.environ is not None else os.environ
    argv = [
        browser,
        "--headless",
        "--no-sandbox",  # bubblewrap is the sandbox; Chromium's own needs privileges
        "--disable-gpu",
        f"--screenshot={png.relative_to(workspace)}",
        "--window-size=1200,900",
        target.as_uri(),
    ]
    try:
        result = await run_process(
            argv,
            cwd=workspace,
            env=scrub_env(environ, secret_names=policy.secret_names, allow=policy.env_allow),
            sandbox=policy.sandbox,
            timeout=min(60.0, policy.timeout_seconds),
            output_cap=4000,
            merge_stderr=True,
        )
    except (SandboxUnavailable, FileNotFoundError) as exc:
        return f"(no screenshot: {exc})"
    exists = await asyncio.to_thread(png.exists)
    if result.exit_code == 0 and exists:
        return f"Screenshot: {png.relative_to(workspace)}"
    return f"(no screenshot: the browser exited with {result.exit_code})"


EDIT_FILE: Final[Tool[ToolContext]] = Tool(
    "edit_file",
    "Replace exact text in a workspace file (the text must occur once unless replace_all).",
    EditFileInput,
    edit_file,
)
SEARCH_FILES: Final[Tool[ToolContext]] = Tool(
    "search_files",
    "Search workspace files for a regular expression; returns `path:line: text` matches.",
    SearchFilesInput,
    search_files,
)
