"""What `${VAR}` in mcp.json reads: the bot's `.env`, overridden by its environment, the
same two places its settings come from (a token kept in `.env` reaches its server)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

# The tool servers' configuration, in RAVEN_HOME.
MCP_FILE = "mcp.json"


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
