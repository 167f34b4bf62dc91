"""RAVEN_HOME/mcp.json: the `mcpServers` shape Claude Code, Claude Desktop and Cursor use, so a
team can paste what it has, plus raven-bot's per-server extras (tool filter, approval mode,
default agents, network, timeout).

`${VAR}` in a stdio server's `env` values and an HTTP server's `headers` values is read from
the mapping the caller passes (the bot's environment and .env): the only way a secret reaches
a server. Any fault in the file is one `McpConfigError` naming the file and the key path."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Server names become part of tool names (`mcp__<server>__<tool>`), so they stay short and
# plain.
SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_TIMEOUT = 600.0


class McpConfigError(ValueError):
    """mcp.json is unreadable or wrong; the message names the file, the key and the fix."""


class ToolFilter(BaseModel):
    """Which of a server's tools are offered: shell-style globs on tool names. No `include`
    means every tool; `exclude` wins over `include`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)

    def allows(self, tool: str) -> bool:
        if any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.exclude):
            return False
        if self.include is None:
            return True
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.include)


class _EntryBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: ToolFilter = Field(default_factory=ToolFilter)
    approval: Literal["ask", "smart", "auto"] = "ask"
    agents: list[str] = Field(default_factory=list)
    timeout: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT)


class StdioServerEntry(_EntryBase):
    """A server the bot starts as a child process and talks to over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    # repr=False: expanded secrets stay out of logs and tracebacks.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    # Whether the sandboxed server may use the network at all (off: not even loopback).
    network: bool = False
    # Directories outside the system's the sandboxed server may read (where it is installed).
    readonly: list[str] = Field(default_factory=list)

    @field_validator("readonly")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path (write it from /)")
        return paths


class HttpServerEntry(_EntryBase):
    """A server reached over streamable HTTP."""

    type: Literal["http"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    # Loopback and private-network hosts are refused unless an admin says so here.
    allow_private_network: bool = False

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("must be an http:// or https:// URL")
        return url


ServerEntry = StdioServerEntry | HttpServerEntry


class McpConfig(BaseModel):
    """The servers of mcp.json, by name (empty when the file does not exist)."""

    model_config = ConfigDict(frozen=True)

    servers: dict[str, ServerEntry] = Field(default_factory=dict)


def load_mcp_config(path: Path, environ: Mapping[str, str]) -> McpConfig:
    """Read and check mcp.json; a missing file means no servers."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return McpConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{path}: cannot be read ({exc})") from exc
    return parse_mcp_config(text, environ, source=str(path))


def parse_mcp_config(text: str, environ: Mapping[str, str], *, source: str) -> McpConfig:
    """Check mcp.json's text; `source` names the file in error messages."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(document, dict):
        raise McpConfigError(f'{source}: should be a JSON object like {{"mcpServers": {{...}}}}')
    unknown = sorted(set(document) - {"mcpServers"})
    if unknown:
        raise McpConfigError(f"{source}: {unknown[0]}: unknown key; the only key is mcpServers")
    raw_servers = document.get("mcpServers", {})
    if not isinstance(raw_servers, dict):
        raise McpConfigError(f"{source}: mcpServers: should be an object of servers by name")
    servers: dict[str, ServerEntry] = {}
    for name, raw in raw_servers.items():
        where = f"{source}: mcpServers.{name}"
        if not SERVER_NAME.match(name):
            raise McpConfigError(
                f"{where}: server name should be 1-40 lowercase letters, digits, '-' or '_',"
                " starting with a letter or digit"
            )
        servers[name] = _expand(_entry(raw, where), environ, where)
    return McpConfig(servers=servers)


def _entry(raw: object, where: str) -> ServerEntry:
    if not isinstance(raw, dict):
        raise McpConfigError(f"{where}: should be an object with a command or a url")
    kind = raw.get("type", "stdio" if "command" in raw or "url" not in raw else "http")
    model: type[ServerEntry]
    if kind == "stdio":
        model = StdioServerEntry
    elif kind in {"http", "streamable-http"}:
        model = HttpServerEntry
        raw = {**raw, "type": "http"}
    else:
        raise McpConfigError(f"{where}.type: should be 'stdio' or 'http' (got {kind!r})")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise McpConfigError(_first_error(exc, where, model)) from None


def _first_error(exc: ValidationError, where: str, model: type[BaseModel]) -> str:
    error = exc.errors()[0]
    path = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        fields = ", ".join(_field_names(model, error["loc"][:-1]))
        return f"{where}.{path}: unknown key; the keys here are: {fields}"
    if error["type"] == "missing":
        return f"{where}.{path}: missing; add it"
    return f"{where}.{path}: {error['msg']} (got {error['input']!r})"


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    if loc == ("tools",):
        return list(ToolFilter.model_fields)
    return [name for name in model.model_fields if name != "type"] + ["type"]


def _expand(entry: ServerEntry, environ: Mapping[str, str], where: str) -> ServerEntry:
    """Replace `${VAR}` in env or header values from `environ`; an unset variable is an error."""

    def resolved(values: dict[str, str], key_name: str) -> dict[str, str]:
        out = {}
        for key, value in values.items():

            def lookup(match: re.Match[str], key: str = key) -> str:
                variable = match.group(1)
                if variable not in environ:
                    raise McpConfigError(
                        f"{where}.{key_name}.{key}: ${{{variable}}} is not set;"
                        " add it to the bot's .env or environment"
                    )
                return environ[variable]

            out[key] = _VARIABLE.sub(lookup, value)
        return out

    if isinstance(entry, StdioServerEntry):
        return entry.model_copy(update={"env": resolved(entry.env, "env")})
    return entry.model_copy(update={"headers": resolved(entry.headers, "headers")})
