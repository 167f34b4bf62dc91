"""What `${VAR}` in mcp.json reads (the bot's `.env`, its environment winning), and the
values the log redactor hides: every variable mcp.json names, even in a file the bot refuses."""

from __future__ import annotations

import json
from pathlib import Path

from host.features.mcp.environ import declared_secrets, server_environ


def test_env_file_values_are_read_and_the_environment_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TRACKER_TOKEN=from-file\nDOCS_TOKEN=docs-file\n")
    environ = server_environ(tmp_path, {"DOCS_TOKEN": "from-env"})
    assert environ["TRACKER_TOKEN"] == "from-file" and environ["DOCS_TOKEN"] == "from-env"
    assert server_environ(tmp_path / "elsewhere", {}) == {}


def test_the_values_mcp_json_names_are_the_secrets_to_redact(tmp_path: Path) -> None:
    home, cwd = tmp_path / "bot-home", tmp_path / "started-in"
    home.mkdir()
    cwd.mkdir()
    (cwd / ".env").write_text("TRACKER_TOKEN=tok-123456789\n")
    servers = {
        "tracker": {"command": "x", "env": {"TRACKER_TOKEN": "${TRACKER_TOKEN}"}},
        "docs": {"type": "http", "url": "http://x", "headers": {"A": "Bearer ${UNSET_ONE}"}},
        "broken": {"nonsense": True},
    }
    (home / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    assert declared_secrets(home, cwd) == ["tok-123456789"]
    assert declared_secrets(tmp_path / "no-home", cwd) == []
