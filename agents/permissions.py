"""The permission gate for agent tool calls: builtin deny, user rules, remembered allows, mode.

Every call goes through one waterfall (first match wins): builtin deny, user deny rules, user
allow rules, allows remembered for the conversation, then the mode (ask-everything | smart |
full-access). "Ask" goes to an `Asker`; a gate built without one (unattended runs) denies.

A call to a tool server (MCP) is tool `mcp` on subject `SERVER:TOOL` (rules such as
`mcp:github:get_*`), and carries its server's trust: after the rules and remembered allows,
full-access allows it, and otherwise the server's approval mode in mcp.json decides (`auto`
allows, `smart` allows what the server marks read-only, the rest asks).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import re
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Final, Literal, Protocol, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from agents.secret_paths import SECRETS_WHAT, command_reaches_secret, is_secret_path
from agents.shell_programs import code_runner, programs
from agents.shell_words import ShellParseError, Word, tokenize

# Re-exported: the gate's callers import it from here.
from agents.tools import ToolTrust as ToolTrust  # noqa: PLC0414
from agents.workspace_tools import denied_reason
from core.errors import FieldError, describe_validation_error, did_you_mean

log = logging.getLogger(__name__)

Tier = Literal["builtin", "user_deny", "user_allow", "remembered", "mode", "human", "unattended"]
Mode = Literal["ask-everything", "smart", "full-access"]
Risk = Literal["low", "high"]
Answer = Literal["allow_once", "allow_conversation", "deny"]

# Tools whose subject is a program text (rule wildcards must not stretch over shell operators).
COMMAND_TOOLS: Final = frozenset({"run_shell", "run_python"})
# Tools whose subject is a workspace path (path-style globs: `*` within a segment, `**` across).
PATH_TOOLS: Final = frozenset(
    {"read_file", "write_file", "edit_file", "list_files", "search_files"}
)
READ_ONLY_TOOLS: Final = frozenset({"read_file", "list_files", "search_files"})
# A call to a tool server: its subject is `SERVER:TOOL` (the arguments are only its detail).
MCP_TOOL: Final = "mcp"
WRITE_TOOLS: Final = frozenset({"write_file", "edit_file"})
DEFAULT_ASK_TIMEOUT_SECONDS: Final = 900.0
DEFAULT_RULES_LABEL: Final = "permissions.toml"

_ANSWERS: Final = frozenset(get_args(Answer))
_MODES: Final = get_args(Mode)


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call to decide: the tool, its subject (command, program, path or URL), and whose."""

    tool: str
    subject: str
    conversation_id: str
    requester: str
    workspace: str  # the Slack team / Discord guild id the rules were loaded for
    # Shown under the question when the gate asks (a diff, the call as the agent named it).
    detail: str = ""
    # A call to a tool server (MCP): how far its server is trusted. None for builtin tools.
    trust: ToolTrust | None = None


@dataclass(frozen=True)
class Decision:
    """The gate's verdict: allowed or not, which tier decided, a readable reason, and the rule."""

    allowed: bool
    tier: Tier
    reason: str
    rule: str | None = None


def subject_of(arguments: Mapping[str, object]) -> str:
    """The part of a call's arguments that rules match: its command, program, path or URL."""
    for name in ("command", "code", "path", "url"):
        value = arguments.get(name)
        if isinstance(value, str):
            return value
    return ""


# -- rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GlobStyle:
    """How a glob's wildcards translate to regular expressions for one kind of subject."""

    star: str
    globstar: str
    one: str
    # `**/` also matches zero directories (`docs/**/*.md` covers `docs/a.md`).
    dirs: bool


# Outside a character class, a wildcard in an allow rule for a command stops at shell operators:
# otherwise `run_shell:git *` would also allow `git status; curl … | sh`.
_NOT_OPERATOR: Final = r"(?:(?!\$\()[^;&|<>`\n\r])"
_PATH_STYLE: Final = _GlobStyle(star=r"[^/]*", globstar=r".*", one=r"[^/]", dirs=True)
_COMMAND_STYLE: Final = _GlobStyle(
    star=_NOT_OPERATOR + "*", globstar=_NOT_OPERATOR + "*", one=_NOT_OPERATOR, dirs=False
)
_LOOSE_STYLE: Final = _GlobStyle(star=r".*", globstar=r".*", one=r".", dirs=False)
_TOOL_NAME: Final = re.compile(r"[A-Za-z_][\w.-]*")
_GLOB_CHARS: Final = re.compile(r"[*?\[]")
_SEPARATORS: Final = re.compile(r"\|\||&&|[;&|\n\r()`]|\$\(")


def _glob_regex(glob: str, style: _GlobStyle) -> re.Pattern[str]:
    pieces: list[str] = []
    i = 0
    while i < len(glob):
        piece, i = _glob_piece(glob, i, style)
        pieces.append(piece)
    return re.compile("".join(pieces), re.DOTALL)


def _glob_piece(glob: str, i: int, style: _GlobStyle) -> tuple[str, int]:
    """The regex for the glob token at `i`, and where the next token starts."""
    if style.dirs and glob.startswith("**/", i):
        return r"(?:.*/)?", i + 3
    if glob.startswith("**", i):
        return style.globstar, i + 2
    char = glob[i]
    if char == "*":
        return style.star, i + 1
    if char == "?":
        return style.one, i + 1
    end = glob.find("]", i + 1) if char == "[" else -1
    content = glob[i + 1 : end]
    if end == -1 or content in ("", "!"):  # an unclosed `[` is a literal, as in fnmatch
        return re.escape(char), i + 1
    negate = content.startswith("!")
    body = content[1:] if negate else content
    body = body.replace("\\", r"\\").replace("^", r"\^")
    return f"[{'^' if negate else ''}{body}]", end + 1


def _squeeze(command: str) -> str:
    # Only spaces and tabs: a newline chains commands and must stay visible to the matcher.
    return re.sub(r"[ \t]+", " ", command).strip()


def normalize_path(path: str) -> str:
    """A path subject as rules see it: `docs/../x` is `x`, `./a` is `a`, "" is `.`."""
    return posixpath.normpath(path.strip() or ".")


def _path_and_parents(path: str) -> list[str]:
    # A deny rule on a directory covers what is inside it (`secrets/*` denies `secrets/a/b`).
    out = [path]
    while (parent := posixpath.dirname(path)) not in ("", path):
        out.append(parent)
        path = parent
    return out


@dataclass(frozen=True)
class PermissionRule:
    """A tool name and an optional glob on the call's subject: `run_shell:git *`, `web_fetch`.

    In path globs `*` stays within a directory and `**` crosses them (`write_file:docs/**`).
    """

    tool: str
    glob: str | None = None
    _strict: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _broad: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.tool):
            written = f"`{self}`" if str(self) else "an empty rule"
            raise ValueError(
                f"{written} does not start with a tool name: a rule is a tool name, optionally "
                "followed by `:` and a glob on its subject, e.g. `run_shell:git *`, "
                "`write_file:docs/**` or `web_fetch`"
            )
        if self.glob is None:
            return
        if not self.glob.strip():
            raise ValueError(
                f"`{self.tool}:` has no glob after `:`: write `{self.tool}` alone to match every "
                f"{self.tool} call, or add a glob such as `{self.tool}:*`"
            )
        if self.tool == MCP_TOOL and ":" not in self.glob and not _GLOB_CHARS.search(self.glob):
            raise ValueError(
                f"`{self}` names no tool: an MCP rule is `mcp:SERVER:TOOL`, e.g. "
                f"`mcp:{self.glob}:*` for every tool of {self.glob} or `mcp:{self.glob}:get_*`"
            )
        strict, broad = self._styles()
        glob = self._normalized_glob()
        object.__setattr__(self, "_strict", _glob_regex(glob, strict))
        object.__setattr__(self, "_broad", _glob_regex(glob, broad))

    @classmethod
    def parse(cls, text: str) -> PermissionRule:
        """The rule written as `text`; `ValueError` says what is wrong and shows the syntax."""
        tool, colon, glob = text.strip().partition(":")
        return cls(tool.strip(), glob.strip() if colon else None)

    def __str__(self) -> str:
        return self.tool if self.glob is None else f"{self.tool}:{self.glob}"

    def matches(self, tool: str, subject: str, *, deny: bool = False) -> bool:
        """Whether the rule covers a call of `tool` on `subject`.

        As an allow rule (the default) the whole subject must match and command wildcards stop at
        shell operators; as a deny rule any chained command or any parent directory is enough.
        """
        if tool != self.tool:
            return False
        if self._strict is None or self._broad is None:
            return True
        regex = self._broad if deny else self._strict
        return any(regex.fullmatch(s) for s in self._candidates(subject, deny=deny))

    def _styles(self) -> tuple[_GlobStyle, _GlobStyle]:
        if self.tool in PATH_TOOLS:
            return _PATH_STYLE, _PATH_STYLE
        if self.tool in COMMAND_TOOLS:
            return _COMMAND_STYLE, _LOOSE_STYLE
        return _LOOSE_STYLE, _LOOSE_STYLE

    def _normalized_glob(self) -> str:
        assert self.glob is not None
        if self.tool in PATH_TOOLS:
            return normalize_path(self.glob)
        if self.tool in COMMAND_TOOLS:
            return _squeeze(self.glob)
        return self.glob

    def _candidates(self, subject: str, *, deny: bool) -> list[str]:
        if self.tool in PATH_TOOLS:
            path = normalize_path(subject)
            return _path_and_parents(path) if deny else [path]
        if self.tool in COMMAND_TOOLS:
            command = _squeeze(subject)
            if not deny:
                return [command]
            parts = (p.strip() for p in _SEPARATORS.split(command))
            return [command, *(p for p in parts if p)]
        return [subject]


def suggest_rule(tool: str, subject: str) -> str:
    """An allow rule matching exactly this call (glob characters escaped), for messages."""
    if not subject.strip():
        return tool
    shown = normalize_path(subject) if tool in PATH_TOOLS else subject
    if tool in COMMAND_TOOLS:
        shown = _squeeze(shown)
    escaped = re.sub(r"([*?\[])", r"[\1]", shown)
    return f"{tool}:{escaped}"


def _check_rule(text: str) -> str:
    PermissionRule.parse(text)
    return text


_RuleText = Annotated[str, AfterValidator(_check_rule)]


class PermissionRules(BaseModel):
    """A workspace's permission settings: the mode and its allow and deny rules (as text)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = "smart"
    allow: list[_RuleText] = Field(default_factory=list)
    deny: list[_RuleText] = Field(default_factory=list)


class PermissionConfigError(ValueError):
    """The permissions file is invalid; the message names the file, the key and the problem."""


class _RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: PermissionRules = Field(default_factory=PermissionRules)
    workspace: dict[str, PermissionRules] = Field(default_factory=dict)


def load_rules(path: Path, workspace: str) -> PermissionRules:
    """`[default]` of the TOML file at `path`, with `[workspace."ID"]` mode and rules applied.

    A missing file gives the defaults. Blocking (reads a file): call it at startup or in a thread.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return PermissionRules()
    except (OSError, UnicodeDecodeError) as exc:
        raise PermissionConfigError(f"{path}: cannot read the file: {exc}") from exc
    return parse_rules(text, workspace, label=str(path))


def rules_file_problem(path: Path) -> str | None:
    """Why the rules file at `path` cannot be used, on one line (every section checked), or
    None when it is fine or absent. Startup and `doctor` report exactly this."""
    try:
        load_rules(path, "")
    except PermissionConfigError as exc:
        return "; ".join(str(exc).splitlines())
    return None


def parse_rules(text: str, workspace: str, *, label: str) -> PermissionRules:
    """Rules for `workspace` from permissions TOML text; errors start with `label` (the file)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PermissionConfigError(f"{label}: invalid TOML: {exc}") from exc
    try:
        config = _RulesFile.model_validate(raw)
    except ValidationError as exc:
        problems = "\n".join(f"{label}: {p}" for p in _describe(exc))
        raise PermissionConfigError(problems) from None
    base = config.default
    section = config.workspace.get(workspace)
    if section is None:
        return base
    mode = section.mode if "mode" in section.model_fields_set else base.mode
    return PermissionRules(
        mode=mode,
        allow=list(dict.fromkeys([*base.allow, *section.allow])),
        deny=list(dict.fromkeys([*base.deny, *section.deny])),
    )


def _describe(exc: ValidationError) -> list[str]:
    """pydantic's errors as `[section] key: problem` lines."""
    rules = {
        "model_type": _not_table,
        "dict_type": _not_table,
        "extra_forbidden": _unknown_key,
        "literal_error": _not_a_mode,
    }
    return describe_validation_error(exc, label=_section_key, rules=rules)


def _section(err: FieldError) -> tuple[str, str, list[str]]:
    """The `[section]` an error is in ("" at the top level), the key in it, its known keys."""
    parts = [str(p) for p in err.loc]
    if parts[:1] == ["workspace"] and len(parts) >= 2:
        where, rest = f'[workspace."{parts[1]}"]', parts[2:]
        known = list(PermissionRules.model_fields)
    elif parts[:1] == ["default"]:
        where, rest, known = "[default]", parts[1:], list(PermissionRules.model_fields)
    else:
        where, rest, known = "", parts, list(_RulesFile.model_fields)
    key = f"{rest[0]}[{rest[1]}]" if len(rest) == 2 else ".".join(rest)  # [1]: an allow/deny item
    return where, key, known


def _section_key(err: FieldError) -> str:
    where, key, _ = _section(err)
    return f"{where} {key}".strip()


def _not_table(err: FieldError) -> str | None:
    where, key, _ = _section(err)
    return None if key else f"{where} must be a table of settings (mode, allow, deny)"


def _unknown_key(err: FieldError) -> str:
    where, key, known = _section(err)
    hint = did_you_mean(key, known, otherwise=f" (known keys: {', '.join(known)})")
    return f"{where} unknown key '{key}'{hint}".strip()


def _not_a_mode(err: FieldError) -> str:
    choices = ", ".join(f'"{m}"' for m in _MODES)
    return f"{_section_key(err)}: {err.value!r} is not a mode; use one of {choices}"


# -- risk ------------------------------------------------------------------------------------

_CHAIN_OR_REDIRECT: Final = re.compile(r"[;&|<>`\n\r]|\$\(")
# find actions that delete, run programs or write files.
_FIND_ACTIONS: Final = frozenset(
    {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
_GIT_READS: Final = frozenset({"status", "diff", "log", "show"})


def _any_arg(args: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def _git_read(args: list[str]) -> bool:
    # --output writes a file; --ext-diff runs a program named in git config.
    return bool(args) and args[0] in _GIT_READS and not _any_arg(args, "--output", "--ext-diff")


_READ_ONLY_COMMANDS: Final[Mapping[str, Callable[[list[str]], bool]]] = MappingProxyType(
    {
        **dict.fromkeys(("ls", "cat", "head", "tail", "wc", "grep", "pwd", "echo"), lambda _: True),
        # --pre and --hostname-bin run a program.
        "rg": lambda args: not _any_arg(args, "--pre", "--hostname-bin"),
        "find": lambda args: not _FIND_ACTIONS.intersection(args),
        "git": _git_read,
    }
)
# Commands whose options can run programs: a glob or brace list could spell such an option
# from a file name the agent created (`find . -ex?c …` with a file called `-exec`).
_OPTION_SENSITIVE: Final = frozenset({"rg", "find", "git"})


def _read_only_command(command: str) -> bool:
    """Only a command on the read-only list, as written: no chaining or redirection, no
    variables or `~` (what they name is unknown), and not a path to some other program.
    Interpreters, test runners and build tools run code from the workspace, so they are not
    on the list (a `conftest.py` written a moment ago runs with `pytest`)."""
    if _CHAIN_OR_REDIRECT.search(command):
        return False
    try:
        tokens = tokenize(command)
    except ShellParseError:  # what would run is unclear
        return False
    words = [t for t in tokens if isinstance(t, Word)]
    if not words or len(words) != len(tokens) or any(w.expands for w in words):
        return False
    program, args = words[0], words[1:]
    check = _READ_ONLY_COMMANDS.get(program.text) if program.plain else None
    if check is None:
        return False
    if program.text in _OPTION_SENSITIVE and any(w.globbed for w in args):
        return False
    return check([w.text for w in args])


def _lexically_inside(path: str) -> bool:
    # Lexical only (the gate does not know the workspace root): the file tools pass the path
    # they resolved (symlinks followed) relative to the workspace. Absolute paths ask.
    norm = normalize_path(path)
    return not norm.startswith("/") and norm.split("/", 1)[0] != ".."


def _inside_workspace(path: str) -> bool:
    # .git hooks and config (of this repository or a nested one) run code on a git command.
    return _lexically_inside(path) and ".git" not in normalize_path(path).split("/")


def risk(tool: str, subject: str) -> Risk:
    """How smart mode sees a call: "low" runs without asking, "high" asks first."""
    if tool in READ_ONLY_TOOLS:
        return "low" if _lexically_inside(subject) else "high"
    if tool in WRITE_TOOLS:
        return "low" if _inside_workspace(subject) else "high"
    if tool == "run_shell":
        return "low" if _read_only_command(subject) else "high"
    return "high"


def runs_code(tool: str, subject: str) -> str | None:
    """Why a call executes code beyond what it shows (for the approval question), or None."""
    if tool == "run_python":
        return "`run_python` runs the program it is given"
    if tool != "run_shell":
        return None
    try:
        names = programs(subject)
    except ShellParseError:
        return "the command does not parse, so what it would run is unclear"
    reasons = [r for r in (code_runner(name) for name in names) if r is not None]
    return "; ".join(dict.fromkeys(reasons)) or None


# -- builtin deny ----------------------------------------------------------------------------

# The bot's secrets and records, as text: .env files (not .env.example & co), the database,
# ssh keys and any process's environment. Path tools are judged on their resolved path and
# shell words on what the shell expands them to; this text check covers the rest (Python code,
# URLs) and catches what a shell word check might miss (`F=.env; cat $F`).
_SECRETS: Final = re.compile(
    r"(?<![\w.-])\.env(?![\w-])(?!\.(?:example|sample|template)(?![\w-]))"
    r"|(?<![\w.-])\.ssh(?![\w.-])"
    r"|\braven\.db\b"
    r"|/proc/[^/\s]+/environ\b"
)
_QUOTING: Final = re.compile(r"[\\'\"]")


def _builtin_deny(call: ToolCallRequest) -> str | None:
    """What builtin deny rule the call breaks, or None."""
    if call.tool in PATH_TOOLS:
        return SECRETS_WHAT if is_secret_path(normalize_path(call.subject)) else None
    if _SECRETS.search(call.subject):
        return SECRETS_WHAT
    if call.tool == "run_shell":
        # Quotes and backslashes vanish before a program sees its arguments (`".e"nv`).
        unquoted = _QUOTING.sub("", call.subject)
        if _SECRETS.search(unquoted) or command_reaches_secret(call.subject):
            return SECRETS_WHAT
        return denied_reason(call.subject)
    return None


# -- boundaries ------------------------------------------------------------------------------


class Asker(Protocol):
    """Asks the requester to approve a call (an approval prompt in the conversation)."""

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        """The requester's answer to `question` about `call`."""
        ...


class RememberedAllows(Protocol):
    """Calls approved "for this conversation", keyed by conversation, tool and exact subject."""

    async def has(self, conversation_id: str, tool: str, subject: str) -> bool:
        """Whether this call was approved for the rest of the conversation."""
        ...

    async def add(self, conversation_id: str, tool: str, subject: str) -> None:
        """Remember an approval for the rest of the conversation."""
        ...


class AuditSink(Protocol):
    """Where every decision is recorded."""

    async def record(self, call: ToolCallRequest, decision: Decision) -> None:
        """Record one decision (allow or deny, every tier)."""
        ...


class MemoryRemembered:
    """`RememberedAllows` in memory (tests, the console); lost when the process ends."""

    def __init__(self) -> None:
        self._allowed: set[tuple[str, str, str]] = set()

    async def has(self, conversation_id: str, tool: str, subject: str) -> bool:
        """Whether this call was approved for the rest of the conversation."""
        return (conversation_id, tool, subject) in self._allowed

    async def add(self, conversation_id: str, tool: str, subject: str) -> None:
        """Remember an approval for the rest of the conversation."""
        self._allowed.add((conversation_id, tool, subject))


class ListAudit:
    """`AuditSink` that keeps decisions in a list, oldest first (tests, the console)."""

    def __init__(self) -> None:
        self.entries: list[tuple[ToolCallRequest, Decision]] = []

    async def record(self, call: ToolCallRequest, decision: Decision) -> None:
        """Append the decision."""
        self.entries.append((call, decision))

    @property
    def decisions(self) -> list[Decision]:
        """The recorded decisions alone."""
        return [decision for _, decision in self.entries]


# -- the gate --------------------------------------------------------------------------------


def _show(call: ToolCallRequest) -> str:
    """`tool` on `subject`, shortened to one line for messages."""
    subject = " ".join(call.subject.split()).replace("`", "'")
    if not subject:
        return f"`{call.tool}`"
    if len(subject) > 120:
        subject = subject[:119] + "…"
    return f"`{call.tool}` on `{subject}`"


class PermissionGate:
    """Decides tool calls by the waterfall; every decision goes to the audit sink.

    Built with `asker=None` (campaigns, background graph nodes) it never asks: where it would,
    it denies (tier "unattended"). This is fixed here, never read from the calling context.
    """

    def __init__(
        self,
        rules: PermissionRules,
        *,
        asker: Asker | None,
        remembered: RememberedAllows,
        audit: AuditSink,
        clock: Callable[[], float] = time.time,
        ask_timeout_seconds: float | None = DEFAULT_ASK_TIMEOUT_SECONDS,
        rules_label: str = DEFAULT_RULES_LABEL,
    ) -> None:
        self._mode: Mode = rules.mode
        self._deny = tuple(PermissionRule.parse(text) for text in rules.deny)
        self._allow = tuple(PermissionRule.parse(text) for text in rules.allow)
        self._asker = asker
        self._remembered = remembered
        self._audit = audit
        self._clock = clock
        self._ask_timeout = ask_timeout_seconds
        self._label = rules_label

    @property
    def unattended(self) -> bool:
        """True when the gate cannot ask anyone (built with `asker=None`)."""
        return self._asker is None

    @property
    def mode(self) -> Mode:
        """The mode this gate applies after the rules."""
        return self._mode

    async def check(self, call: ToolCallRequest) -> Decision:
        """Decide `call`; the decision is recorded in the audit sink before it is returned."""
        decision = await self._decide(call)
        try:
            await self._audit.record(call, decision)
        except Exception:
            # A lost audit line must not change the decision, least of all turn a deny into allow.
            log.exception(
                "permission audit failed; %s decision on %s stands", decision.tier, call.tool
            )
        return decision

    async def _decide(self, call: ToolCallRequest) -> Decision:
        shown = _show(call)
        builtin = _builtin_deny(call)
        if builtin is not None:
            return Decision(
                False,
                "builtin",
                f"Refused {shown}: it looks like {builtin}, which is never allowed here "
                "(builtin deny rule; no rule or mode changes this).",
                builtin,
            )
        for rule in self._deny:
            if rule.matches(call.tool, call.subject, deny=True):
                return Decision(
                    False,
                    "user_deny",
                    f"Refused {shown}: it matches the deny rule `{rule}` in {self._label}. "
                    "Remove that rule to allow it.",
                    str(rule),
                )
        for rule in self._allow:
            if rule.matches(call.tool, call.subject):
                reason = f"Allowed {shown}: it matches the allow rule `{rule}` in {self._label}."
                return Decision(True, "user_allow", reason, str(rule))
        if await self._is_remembered(call):
            reason = f"Allowed {shown}: the requester approved it for this conversation."
            return Decision(True, "remembered", reason, suggest_rule(call.tool, call.subject))
        return await self._by_mode(call, shown)

    async def _is_remembered(self, call: ToolCallRequest) -> bool:
        try:
            return await self._remembered.has(call.conversation_id, call.tool, call.subject)
        except Exception:
            # Failing to read approvals only means asking again (or denying), never allowing.
            log.exception("reading remembered approvals failed; treating %s as new", call.tool)
            return False

    async def _by_mode(self, call: ToolCallRequest, shown: str) -> Decision:
        level = risk(call.tool, call.subject)
        setting = f"mode = {self._mode}"
        if self._mode == "full-access":
            reason = f"Allowed {shown}: the mode is full-access and no rule denies it."
            return Decision(True, "mode", reason, setting)
        if call.trust is not None:
            return await self._by_trust(call, shown, call.trust)
        if self._mode == "smart" and level == "low":
            reason = f"Allowed {shown}: it is low risk (read-only or inside the workspace)."
            return Decision(True, "mode", reason, setting)
        if self._asker is None:
            return self._unattended(call, shown, level)
        return await self._ask(self._asker, call, shown, self._needs_approval())

    async def _by_trust(self, call: ToolCallRequest, shown: str, trust: ToolTrust) -> Decision:
        """A tool server's call after the rules: its server's approval mode in mcp.json
        decides (the workspace mode only where it is full-access, handled before)."""
        server = call.subject.partition(":")[0]
        setting = f'approval = "{trust.approval}" for {server} in mcp.json'
        mode_is = f'the server {server}\'s approval mode in mcp.json is "{trust.approval}"'
        if trust.approval == "auto":
            reason = f"Allowed {shown}: {mode_is}, so its calls run without asking."
            return Decision(True, "mode", reason, setting)
        if trust.approved_with_task:
            reason = (
                f"Allowed {shown}: its scheduled task's plan grants this node the server "
                f"{server}, and the task's owner approved that plan."
            )
            return Decision(True, "mode", reason, f"[mcp {server}] in the task's plan")
        if trust.approval == "smart" and trust.read_only:
            reason = f"Allowed {shown}: {mode_is} and the server marks this tool read-only."
            return Decision(True, "mode", reason, setting)
        needs = (
            f"{mode_is} and the server does not mark this tool read-only"
            if trust.approval == "smart"
            else f"{mode_is}, which asks before every call"
        )
        if self._asker is None:
            reason = (
                f"Refused {shown}: this is an unattended run, so nobody can approve it, and "
                f"{needs}. To let unattended runs call it, add the allow rule "
                f"`{suggest_rule(call.tool, call.subject)}` to {self._label}."
            )
            return Decision(False, "unattended", reason, setting)
        return await self._ask(self._asker, call, shown, needs)

    def _needs_approval(self) -> str:
        if self._mode == "smart":
            return "smart mode asks before high-risk calls like this one"
        return "ask-everything mode asks before every call"

    def _unattended(self, call: ToolCallRequest, shown: str, level: Risk) -> Decision:
        better = "smart" if level == "low" else "full-access"
        reason = (
            f"Refused {shown}: this is an unattended run, so nobody can approve it, and "
            f"{self._needs_approval()}. To let unattended runs do this, add the allow rule "
            f'`{suggest_rule(call.tool, call.subject)}` to {self._label} or set mode = "{better}".'
        )
        return Decision(False, "unattended", reason, f"mode = {self._mode}")

    async def _ask(self, asker: Asker, call: ToolCallRequest, shown: str, needs: str) -> Decision:
        question = f"Allow {shown}? Approval is needed because {needs}."
        why = runs_code(call.tool, call.subject)
        if why is not None:
            question += f" It runs code: {why}."
        if call.detail:
            question += f"\n{call.detail}"
        started = self._clock()
        try:
            async with asyncio.timeout(self._ask_timeout):
                answer = await asker.ask(call, question)
        except Exception as exc:  # no answer is a no: the gate fails closed
            waited = self._clock() - started
            log.warning("approval prompt for %s failed after %.0fs: %r", call.tool, waited, exc)
            what = (
                f"no answer came within {self._ask_timeout:.0f} s"
                if isinstance(exc, TimeoutError)
                else f"the approval prompt failed ({type(exc).__name__}: {exc})"
            )
            reason = (
                f"Refused {shown}: {what}, and an unanswered approval counts as no. Try again, or "
                f"add the allow rule `{suggest_rule(call.tool, call.subject)}` to {self._label}."
            )
            return Decision(False, "human", reason)
        return await self._answered(call, shown, answer)

    async def _answered(self, call: ToolCallRequest, shown: str, answer: str) -> Decision:
        if answer == "allow_once":
            return Decision(True, "human", f"Allowed {shown}: the requester approved it once.")
        if answer == "allow_conversation":
            try:
                await self._remembered.add(call.conversation_id, call.tool, call.subject)
            except Exception:
                # The requester did approve: this call runs; only the memory of it is lost.
                log.exception("remembering an approval for %s failed", call.tool)
            reason = f"Allowed {shown}: the requester approved it for this conversation."
            return Decision(True, "human", reason)
        if answer not in _ANSWERS:
            log.warning("approval prompt returned %r; treating it as deny", answer)
        return Decision(
            False,
            "human",
            f"Refused {shown}: the requester declined it. It will be asked again if retried; "
            f"to allow it without asking, add the allow rule "
            f"`{suggest_rule(call.tool, call.subject)}` to {self._label}.",
        )
