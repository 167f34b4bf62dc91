"""What `${VAR}` in mcp.json reads: the bot's `.env`, overridden by its environment, the
same two places its settings come from (a token kept in `.env` reaches its server)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dotenv import dotenv_values

from core.errors import ConfigError

if TYPE_CHECKING:
    from mcp_client import McpConfig

# The tool servers' configuration, in RAVEN_HOME.
MCP_FILE = "mcp.json"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def server_environ(cwd: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables `${VAR}` may name, for a bot started in `cwd`."""
    env_file = cwd / ".env"
    from_file: dict[str, str] = {}
    if env_file.is_file():
        try:
            loaded = dotenv_values(env_file, encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            loaded = {}  # settings already refused an unreadable .env at start-up
        from_file = {k: v for k, v in loaded.items() if v is not None}
    return {**from_file, **(os.environ if environ is None else environ)}


def declared_secrets(home: Path, cwd: Path) -> list[str]:
    """The values mcp.json's `${VAR}`s stand for (tokens for its servers), for the log
    redactor: read as text, so a file the bot will refuse still has its secrets hidden."""
    try:
        text = (home / MCP_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return referenced_values(text, server_environ(cwd)) if _VARIABLE.search(text) else []


def referenced_values(text: str, environ: Mapping[str, str]) -> list[str]:
    """What the `${VAR}`s in `text` stand for in `environ` (the set ones), by name."""
    names = sorted(set(_VARIABLE.findall(text)))
    return [environ[name] for name in names if environ.get(name)]


def read_mcp_config(home: Path, cwd: Path) -> McpConfig | None:
    """RAVEN_HOME/mcp.json with its `${VAR}`s filled for a bot started in `cwd` (None when
    absent: the MCP SDK is not even imported); `ConfigError` says what is wrong in one line
    naming the file and key."""
    path = home / MCP_FILE
    if not path.is_file():
        return None
    from mcp_client import McpConfigError, load_mcp_config

    try:
        return load_mcp_config(path, server_environ(cwd))
    except McpConfigError as exc:
        raise ConfigError(str(exc)) from None
