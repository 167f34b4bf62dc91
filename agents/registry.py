"""The agent registry: names, descriptions, backends and capability tags (paper §3.1).

Defaults (the in-process roster and third-party CLI presets) can be overridden field by field,
or extended, from an optional TOML file (`RAVEN_HOME/agents.toml`):

    [agents.code]
    enabled = false

    [agents.aider]
    backend = "cli"
    description = "Aider pair-programmer"
    command = ["aider", "--yes", "--message"]
    prompt_via = "arg"

    [agents.shell]
    allow = ["ls", "ls *", "echo *", "python3 -m pytest*"]

    [agents.research]
    model = "openai:qwen2.5-coder@http://127.0.0.1:8080/v1"   # its own model (RAVEN_MODEL's forms)
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.models.model_spec import ModelSpecError, parse_model_spec
from core.errors import FieldError, describe_validation_error, did_you_mean
from core.secret_names import SecretNames

# What agents.toml may name; `feature` is an agent a capability runs itself (its feature
# gives the entry and the backend: the `mcp` agent's one tool-server call).
ConfigBackend = Literal["inproc", "cli", "api", "acp"]
Backend = Literal["inproc", "cli", "api", "acp", "feature"]
Which = Callable[[str], str | None]
# Whether a (real) path is visible to agent commands: the sandbox's view (agents.sandbox).
Visible = Callable[[Path], bool]

NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ROLES: Final = ("raven", "research", "code", "design", "oncall")


class RegistryError(ValueError):
    """The agent configuration is invalid; the message names the file and the offending key."""


@dataclass(frozen=True)
class AgentEntry:
    """One registered agent: identity, backend binding and capability tags."""

    name: str
    description: str
    backend: Backend
    stateful: bool
    file_capable: bool
    progress: bool
    enabled: bool
    role: str
    command: tuple[str, ...] = ()
    prompt_via: Literal["stdin", "arg"] = "stdin"
    model: str | None = None
    base_url: str | None = None
    api_style: Literal["anthropic", "openai"] = "anthropic"
    api_key_env: str | None = None
    timeout_seconds: float = 900
    output_cap_chars: int = 200_000
    # Extra environment variable names a cli agent may see (never secret-looking ones).
    env_allow: tuple[str, ...] = ()
    # The task text is one shell command (`command` + the task): each run needs the requester's
    # approval unless it matches an `allow` pattern (see `command_allowed`). Such an agent
    # reads no prose: the graph runtime gives it its command only (no group memory, skills or
    # continuation wrapper) and pastes placeholders in as raw, shell-quoted words, so the
    # command approved is the command run. Every other agent takes a prompt.
    runs_commands: bool = False
    allow: tuple[str, ...] = ()
    # Why a configured agent is not enabled (missing binary, unsupported backend); "" if enabled.
    disabled_reason: str = ""
    # ACP agents: how long `initialize` (and opening a session) may take, how long an idle
    # process is kept, the mode to set on each session, and how to install the agent.
    init_timeout_seconds: float = 30.0
    idle_seconds: float = 600.0
    mode: str | None = None
    install_hint: str = ""
    # cli and acp agents: whether their process may reach any network (ACP coding agents
    # call their own model APIs); False cuts it off, loopback included (the sandbox does).
    network: bool = True
    # inproc and acp agents: the team's tool servers (names in mcp.json) every task of this
    # agent gets unless a node says otherwise (a node's `mcp` override).
    mcp: tuple[str, ...] = ()
    # In-process agents: the skills every task gets unless a node says otherwise (None: the
    # specialist's own defaults).
    skills: tuple[str, ...] | None = None

    @property
    def tags(self) -> list[str]:
        """Capability tags for the roster: stateful, file-capable, progress."""
        tags = []
        if self.stateful:
            tags.append("stateful")
        if self.file_capable:
            tags.append("file-capable")
        if self.progress:
            tags.append("progress")
        return tags


def _inproc(name: str, description: str) -> AgentEntry:
    return AgentEntry(
        name=name,
        description=description,
        backend="inproc",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role=name,
    )


def _cli_preset(name: str, description: str, command: tuple[str, ...]) -> AgentEntry:
    return AgentEntry(
        name=name,
        description=description,
        backend="cli",
        stateful=False,
        file_capable=True,
        progress=False,
        enabled=True,
        role="raven",
        command=command,
        prompt_via="arg",
    )


def default_entries() -> list[AgentEntry]:
    """The built-in roster plus third-party CLI presets (before PATH checks)."""
    return [
        _inproc(
            "raven",
            "General assistant: answers questions, explains, summarises and reads files in the "
            "conversation workspace; use it when no specialist fits.",
        ),
        _inproc(
            "research",
            "Research specialist: gathers and weighs evidence into a report with a sources "
            "section, and says plainly what it could not verify.",
        ),
        _inproc(
            "code",
            "Coding specialist: reads and writes files in the workspace, runs shell commands and "
            "tests, and reports what it changed and how it verified it.",
        ),
        _inproc(
            "design",
            "Design specialist: produces HTML, SVG and Markdown artifacts (mockups, diagrams, "
            "docs) in the workspace and lists the files it made.",
        ),
        _inproc(
            "oncall",
            "Oncall specialist: plans and explains long-running campaigns (training runs, "
            "sweeps, solver jobs); campaigns themselves run through the Host's campaign tools.",
        ),
        AgentEntry(
            name="shell",
            description="Runs its task as one shell command (`sh -c`) in the conversation "
            "workspace, inside the sandbox; the requester approves each command unless it is "
            "allowed in agents.toml. Write the task as the exact command, e.g. `ls -la`.",
            backend="cli",
            stateful=False,
            file_capable=False,
            progress=False,
            enabled=True,
            role="raven",
            command=("sh", "-c"),
            prompt_via="arg",
            timeout_seconds=600,
            runs_commands=True,
        ),
        _cli_preset(
            "claude-code",
            "Claude Code CLI (`claude -p`) run headless in the workspace: strong at multi-file "
            "code changes; each task starts fresh.",
            ("claude", "-p"),
        ),
        *acp_presets(),
        _cli_preset(
            "codex",
            "OpenAI Codex CLI (`codex exec`) run headless in the workspace: code changes and "
            "repository tasks; each task starts fresh.",
            ("codex", "exec"),
        ),
    ]


def _acp_preset(name: str, description: str, command: tuple[str, ...], install: str) -> AgentEntry:
    # A third-party agent like a CLI preset, but kept running: sessions, progress, long turns.
    return replace(
        _cli_preset(name, description, command),
        backend="acp",
        stateful=True,
        progress=True,
        prompt_via="stdin",
        timeout_seconds=1800,
        install_hint=install,
    )


def acp_presets() -> list[AgentEntry]:
    """Coding agents that speak ACP, each enabled only where its launcher is found."""
    keeps = "keeps its session across the nodes of one instance handle"
    return [
        _acp_preset(
            "claude-acp",
            f"Claude Code over ACP: multi-file code changes in the workspace; asks before "
            f"edits and commands (buttons in the thread); {keeps}.",
            ("claude-agent-acp",),
            "install it with `npm install -g @agentclientprotocol/claude-agent-acp` and log in "
            "with `claude`",
        ),
        _acp_preset(
            "codex-acp",
            f"OpenAI Codex over ACP: code changes and repository tasks; asks before edits and "
            f"commands; {keeps}.",
            ("codex-acp",),
            "install it with `npm install -g @agentclientprotocol/codex-acp` and log in with "
            "`codex login`",
        ),
        _acp_preset(
            "gemini",
            f"Gemini CLI over ACP: code and research in the workspace; {keeps}.",
            ("gemini", "--experimental-acp"),
            "install it with `npm install -g @google/gemini-cli`",
        ),
        _acp_preset(
            "opencode",
            f"opencode over ACP: code changes with the model it is configured for; {keeps}.",
            ("opencode", "acp"),
            "install it with `npm install -g opencode-ai`",
        ),
        _acp_preset(
            "hermes",
            f"Hermes agent over ACP: general tasks with its own tools; {keeps}.",
            ("hermes", "acp"),
            "install it with `pip install hermes-agent` (its `hermes` command)",
        ),
    ]


class AgentRegistry:
    """An immutable set of agent entries, in roster order."""

    def __init__(self, entries: Iterable[AgentEntry]) -> None:
        by_name: dict[str, AgentEntry] = {}
        for entry in entries:
            if entry.name in by_name:
                raise RegistryError(f"duplicate agent name `{entry.name}`")
            by_name[entry.name] = entry
        self._entries: Mapping[str, AgentEntry] = MappingProxyType(by_name)

    def get(self, name: str) -> AgentEntry | None:
        """The entry called `name`, or None."""
        return self._entries.get(name)

    def require(self, name: str) -> AgentEntry:
        """The enabled entry called `name`; `RegistryError` saying what exists otherwise."""
        entry = self._entries.get(name)
        known = ", ".join(f"`{e.name}`" for e in self.enabled()) or "none"
        if entry is None:
            raise RegistryError(f"Unknown agent `{name}`. Available agents: {known}.")
        if not entry.enabled:
            why = f" ({entry.disabled_reason})" if entry.disabled_reason else ""
            raise RegistryError(f"Agent `{name}` is disabled{why}. Available agents: {known}.")
        return entry

    def entries(self) -> tuple[AgentEntry, ...]:
        """Every entry, enabled or not."""
        return tuple(self._entries.values())

    def enabled(self) -> tuple[AgentEntry, ...]:
        """The entries the Host may dispatch to."""
        return tuple(e for e in self._entries.values() if e.enabled)

    def roster_text(self) -> str:
        """Markdown lines `- `name` — description [tags]` of enabled agents, for the Host."""
        lines = []
        for entry in self.enabled():
            tags = f" [{', '.join(entry.tags)}]" if entry.tags else ""
            lines.append(f"- `{entry.name}` — {entry.description}{tags}")
        return "\n".join(lines)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[AgentEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


# -- the configuration file ------------------------------------------------------------------


class _EntryConfig(BaseModel):
    """One `[agents.NAME]` table; every key optional so a table can override a default."""

    # TOML values are typed already: no coercion ("yes" is not a bool), unknown keys refused.
    model_config = ConfigDict(extra="forbid", strict=True)

    backend: ConfigBackend | None = None
    description: str | None = Field(None, min_length=1)
    stateful: bool | None = None
    file_capable: bool | None = None
    progress: bool | None = None
    enabled: bool | None = None
    role: str | None = None
    command: list[str] | None = Field(None, min_length=1)
    prompt_via: Literal["stdin", "arg"] | None = None
    model: str | None = None
    base_url: str | None = None
    api_style: Literal["anthropic", "openai"] | None = None
    api_key_env: str | None = None
    timeout_seconds: float | None = Field(None, gt=0)
    output_cap_chars: int | None = Field(None, gt=0)
    env_allow: list[str] | None = None
    allow: list[str] | None = None
    args: list[str] | None = None
    mode: str | None = Field(None, min_length=1)
    init_timeout_seconds: float | None = Field(None, gt=0)
    idle_seconds: float | None = Field(None, gt=0)
    network: bool | None = None
    mcp: list[str] | None = None
    skills: list[str] | None = None


class _FileConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    agents: dict[str, _EntryConfig] = Field(default_factory=dict)


# Capability defaults for agents the file adds, by backend (explicit keys still win).
_NEW_AGENT_DEFAULTS: Final[Mapping[str, Mapping[str, bool]]] = MappingProxyType(
    {
        "inproc": MappingProxyType({"stateful": True, "file_capable": True, "progress": True}),
        "cli": MappingProxyType({"stateful": False, "file_capable": True, "progress": False}),
        "api": MappingProxyType({"stateful": True, "file_capable": False, "progress": False}),
        "acp": MappingProxyType({"stateful": True, "file_capable": True, "progress": True}),
    }
)


def load_registry(
    path: Path | None,
    *,
    which: Which = shutil.which,
    visible: Visible | None = None,
    extra: Sequence[AgentEntry] = (),
    secret_names: SecretNames,
) -> AgentRegistry:
    """Defaults, overridden/extended by the TOML file at `path` if it exists; then availability.

    Raises `RegistryError` naming the file and key for anything invalid. CLI agents whose binary
    or ACP agents whose program is not on PATH, or (given `visible`, the sandbox's view) lives
    where the sandbox does not show it, are kept but disabled, with `disabled_reason` saying
    why. `extra`: agents the installed capabilities run themselves (overridable like the
    defaults). `secret_names`: the settings' secret names, which no `env_allow` may list.
    """
    entries = {e.name: e for e in [*default_entries(), *extra]}
    if path is not None and path.exists():
        config = _read_config(path)
        label = str(path)
        for name, table in config.agents.items():
            entries[name] = _merge(label, name, entries.get(name), table, secret_names)
    return AgentRegistry(_availability(e, which, visible) for e in entries.values())


def default_registry(
    *, which: Which = shutil.which, visible: Visible | None = None
) -> AgentRegistry:
    """The registry with no configuration file (nothing to check against secret names)."""
    return load_registry(None, which=which, visible=visible, secret_names=SecretNames())


def _read_config(path: Path) -> _FileConfig:
    label = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{label}: invalid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{label}: cannot read the file: {exc}") from exc
    try:
        return _FileConfig.model_validate(raw)
    except ValidationError as exc:
        raise RegistryError("\n".join(f"{label}: {p}" for p in _describe(exc))) from exc


def _describe(exc: ValidationError) -> list[str]:
    """Pydantic errors as `[agents.NAME] key: problem` clauses."""
    rules = {"extra_forbidden": _unknown_key, "dict_type": _not_table, "model_type": _not_table}
    return describe_validation_error(exc, label=_entry_key, rules=rules)


def _entry_table(err: FieldError) -> tuple[str, list[str]]:
    """The `[agents.NAME]` table an error is in ("" at the top level) and the key path in it."""
    loc = [str(p) for p in err.loc]
    if loc and loc[0] == "agents" and len(loc) >= 2:
        return f"[agents.{loc[1]}]", loc[2:]
    return "", loc


def _entry_key(err: FieldError) -> str:
    where, rest = _entry_table(err)
    return f"{where} {'.'.join(rest) or '(table)'}".strip()


def _unknown_key(err: FieldError) -> str | None:
    where, rest = _entry_table(err)
    if not rest:
        return None
    options = list(_EntryConfig.model_fields) if where else ["agents"]
    return f"{where} unknown key '{rest[-1]}'{did_you_mean(rest[-1], options)}".strip()


def _not_table(err: FieldError) -> str | None:
    where, rest = _entry_table(err)
    if not where and rest == ["agents"] and err.kind == "dict_type":
        return "agents: must be a table of [agents.NAME] tables"
    return f"{where} must be a table of settings" if where and not rest else None


def _merge(
    label: str,
    name: str,
    base: AgentEntry | None,
    table: _EntryConfig,
    secret_names: SecretNames,
) -> AgentEntry:
    where = f"{label}: [agents.{name}]"
    if not NAME_PATTERN.match(name):
        raise RegistryError(
            f"{label}: [agents.{name}] invalid agent name: use 1-40 characters, lowercase "
            "letters, digits, '-' or '_', starting with a letter"
        )
    given = table.model_dump(exclude_none=True)
    if "command" in given:
        given["command"] = tuple(given["command"])
    if "args" in given:
        # Arguments after the command (the preset's, or this table's own).
        base_command = base.command if base is not None else ()
        given["command"] = (*given.get("command", base_command), *given.pop("args"))
    if "env_allow" in given:
        given["env_allow"] = tuple(given["env_allow"])
    if "allow" in given:
        given["allow"] = tuple(given["allow"])
    for key in ("mcp", "skills"):
        if key in given:
            given[key] = tuple(given[key])
    if base is None:
        if "description" not in given:
            raise RegistryError(f"{where} description: required for a new agent")
        backend = given.get("backend", "inproc")
        # An Anthropic-style api agent runs our own loop, so it has the loop's capabilities.
        loop_like = backend == "api" and given.get("api_style", "anthropic") == "anthropic"
        values: dict[str, Any] = {
            "name": name,
            "backend": backend,
            "enabled": True,
            "role": "raven",
            **_NEW_AGENT_DEFAULTS["inproc" if loop_like else backend],
            **given,
        }
        entry = AgentEntry(**values)
    else:
        entry = replace(base, **given)
    _check(where, entry, given, secret_names=secret_names)
    return entry


def _check(
    where: str, entry: AgentEntry, given: Mapping[str, Any], *, secret_names: SecretNames
) -> None:
    if entry.role not in ROLES:
        raise RegistryError(f"{where} role: must be one of {', '.join(map(repr, ROLES))}")
    if entry.backend == "cli" and not entry.command:
        raise RegistryError(f'{where} command: a cli agent needs a command, e.g. ["tool", "-p"]')
    if "allow" in given and not entry.runs_commands:
        raise RegistryError(f"{where} allow: only used by command-running agents like `shell`")
    if entry.backend == "api" and not entry.model:
        raise RegistryError(f"{where} model: an api agent needs a model name")
    _check_model(where, entry)
    for name in entry.env_allow:
        if secret_names.looks_secret(name) and name != entry.api_key_env:
            raise RegistryError(
                f"{where} env_allow: '{name}' looks like a secret; set api_key_env = '{name}' "
                "to grant this agent its own key"
            )
    _check_backend_keys(where, entry, given)
    if "skills" in given and entry.backend != "inproc":
        raise RegistryError(f"{where} skills: only in-process agents take skills")
    if "mcp" in given and (entry.backend not in ("inproc", "acp") or entry.runs_commands):
        raise RegistryError(
            f"{where} mcp: only in-process and acp agents can call the team's tool servers"
        )


def _check_model(where: str, entry: AgentEntry) -> None:
    """An in-process agent's own model, in RAVEN_MODEL's forms (bot/models.py builds it);
    an api or acp agent's `model` is its server's own name for a model, passed on as is."""
    if entry.backend != "inproc" or entry.model is None:
        return
    try:
        parse_model_spec(entry.model)
    except ModelSpecError as exc:
        raise RegistryError(f"{where} model: {exc}") from None


def _check_backend_keys(where: str, entry: AgentEntry, given: Mapping[str, Any]) -> None:
    """Keys that only one kind of backend uses."""
    if entry.backend == "acp" and not entry.command:
        raise RegistryError(
            f'{where} command: an acp agent needs the command that starts it, e.g. ["opencode", '
            '"acp"]'
        )
    if entry.backend not in ("cli", "acp") and "command" in given:
        raise RegistryError(f"{where} command: only used by cli and acp agents")
    if entry.backend != "cli":
        for key in ("prompt_via", "allow"):
            if key in given:
                raise RegistryError(f"{where} {key}: only used by cli agents")
    if entry.backend not in ("cli", "acp") and "network" in given:
        raise RegistryError(f"{where} network: only used by cli and acp agents")
    if entry.backend != "acp":
        for key in ("mode", "init_timeout_seconds", "idle_seconds"):
            if key in given:
                raise RegistryError(f"{where} {key}: only used by acp agents")


# Characters that chain, substitute or redirect: a command with any of them always asks, so a
# pattern like `echo *` can never approve `echo hi; rm -rf ~`.
_SHELL_CONTROL: Final = re.compile(r"[;&|`<>\n\r]|\$\(")


def command_allowed(command: str, patterns: Iterable[str]) -> bool:
    """True when `command` runs without asking: it matches an allow pattern and has no
    shell control characters. Patterns are shell-style globs (`*`, `?`, `[...]`) matched
    against the whole command with surrounding whitespace stripped."""
    text = command.strip()
    if not text or _SHELL_CONTROL.search(text):
        return False
    return any(fnmatch.fnmatchcase(text, pattern.strip()) for pattern in patterns)


def _availability(entry: AgentEntry, which: Which, visible: Visible | None) -> AgentEntry:
    """Disable entries that cannot run here, saying why, instead of failing at startup."""
    if not entry.enabled:
        return (
            entry if entry.disabled_reason else replace(entry, disabled_reason="disabled in config")
        )
    if entry.backend not in ("cli", "acp"):
        return entry
    program = entry.command[0]
    found = which(program)
    if found is None:
        hint = f"; {entry.install_hint}" if entry.install_hint else ""
        why = f"`{program}` was not found on PATH{hint}"
        return replace(entry, enabled=False, disabled_reason=why)
    hidden = None if visible is None else _hidden_from_sandbox(Path(found), which, visible)
    if hidden is not None:
        return replace(entry, enabled=False, disabled_reason=_not_visible(program, found, hidden))
    return entry


def _hidden_from_sandbox(found: Path, which: Which, visible: Visible) -> Path | None:
    """The file the sandbox hides that running `found` needs (its real path, or the real
    path of its `#!` interpreter), or None when the sandbox shows both."""
    real = found.resolve()
    if not visible(real):
        return real
    interpreter = _interpreter(real, which)
    if interpreter is not None and not visible(interpreter.resolve()):
        return interpreter.resolve()
    return None


def _interpreter(script: Path, which: Which) -> Path | None:
    """The program a `#!` line runs (`#!/usr/bin/env node` → node on PATH), if any."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(256)
    except OSError:
        return None
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        found = which(names[0]) if names else None
        return Path(found) if found else None
    return Path(words[0])


def _not_visible(program: str, found: str, hidden: Path) -> str:
    where = f"found at {found}" + (f" ({hidden})" if str(hidden) != found else "")
    if hidden != Path(found).resolve():
        where = f"found at {found}, which runs {hidden}"
    return (
        f"`{program}` was {where}, which agent commands cannot see: the sandbox shows only "
        "system paths (/usr, /opt, …) and hides $HOME; install it system-wide (e.g. under "
        "/usr/local/bin), or set RAVEN_UNSANDBOXED=1 (unsafe)"
    )
