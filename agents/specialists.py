"""Specialists: configurations of the one agent loop (system prompt, tools, harness), not forks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from agents.harness import Harness
from agents.more_tools import EDIT_FILE, SEARCH_FILES, artifact_tool, python_tool
from agents.tools import Tool, ToolRegistry
from agents.workspace_tools import (
    LIST_FILES,
    READ_FILE,
    WRITE_FILE,
    ShellPolicy,
    ToolContext,
    shell_tool,
)
from core.secret_names import SecretNames

ToolFactory = Callable[[Path], ToolRegistry[ToolContext]]
# A hook for web access: given the workspace, the extra tools research may use (none by default).
WebTools = Callable[[Path], Sequence[Tool[ToolContext]]]

_WEB_OFF = (
    "You have no web access here: rely on workspace files and your own knowledge, and mark "
    "knowledge-based claims as unverified."
)
_WEB_ON = "Use the web tools to find and check sources; cite the URL of each one you rely on."


def load_prompt(role: str, **fields: str) -> str:
    """A specialist's system prompt from `agents/prompts/<role>.md`, with the shared rules
    (`common.md`) and any other `{field}` filled in."""
    folder = resources.files("agents.prompts")
    text = folder.joinpath(f"{role}.md").read_text("utf-8")
    values = {"common": folder.joinpath("common.md").read_text("utf-8"), **fields}
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


RAVEN_PROMPT = load_prompt("raven")
CODE_PROMPT = load_prompt("code")
DESIGN_PROMPT = load_prompt("design")
ONCALL_PROMPT = load_prompt("oncall")


@dataclass(frozen=True)
class Specialist:
    """A loop configuration: role name, system prompt, tool factory and harness."""

    role: str
    system_prompt: str
    tools: ToolFactory
    harness: Harness = field(default_factory=Harness)
    # Skills every task of this specialist gets (by name; the Host resolves them).
    default_skills: tuple[str, ...] = ()


def _fixed(*tools: Tool[ToolContext]) -> ToolFactory:
    registry = ToolRegistry(list(tools))

    def factory(workspace: Path) -> ToolRegistry[ToolContext]:
        return registry

    return factory


def default_specialists(
    *,
    shell: ShellPolicy | None = None,
    web_tools: WebTools | None = None,
) -> Mapping[str, Specialist]:
    """The five built-in specialists keyed by role (read-only mapping).

    `shell` configures the code agent's `run_shell`; `web_tools`, if given, adds web access to
    research (not implemented here: the hook is for a configured web search/fetch).
    """
    # Without the assembly root's policy the command tools run nothing (its sandbox refuses).
    policy = shell or ShellPolicy(secret_names=SecretNames())
    run_shell = shell_tool(policy)
    run_python, check = python_tool(policy), artifact_tool(policy)

    def research_tools(workspace: Path) -> ToolRegistry[ToolContext]:
        extra = list(web_tools(workspace)) if web_tools is not None else []
        return ToolRegistry([READ_FILE, LIST_FILES, SEARCH_FILES, WRITE_FILE, *extra])

    research_prompt = load_prompt("research", web=_WEB_ON if web_tools is not None else _WEB_OFF)
    specialists = [
        Specialist("raven", RAVEN_PROMPT, _fixed(READ_FILE, LIST_FILES, SEARCH_FILES)),
        Specialist("research", research_prompt, research_tools, default_skills=("research-brief",)),
        Specialist(
            "code",
            CODE_PROMPT,
            _fixed(
                READ_FILE, WRITE_FILE, EDIT_FILE, LIST_FILES, SEARCH_FILES, run_shell, run_python
            ),
            default_skills=("run-test-suite",),
        ),
        Specialist(
            "design",
            DESIGN_PROMPT,
            _fixed(READ_FILE, WRITE_FILE, EDIT_FILE, LIST_FILES, check),
            default_skills=("svg-chart",),
        ),
        Specialist(
            "oncall",
            ONCALL_PROMPT,
            _fixed(READ_FILE, LIST_FILES, SEARCH_FILES),
            default_skills=("monitor-training-run", "campaign-report"),
        ),
    ]
    return MappingProxyType({s.role: s for s in specialists})
