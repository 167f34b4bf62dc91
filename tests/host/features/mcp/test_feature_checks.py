"""What stops the start before any server runs: a `readonly` directory that would show what
the sandbox hides, and defaults naming servers or agents that do not exist."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agents.registry import AgentRegistry, load_registry
from core.errors import ConfigError
from core.secret_names import SecretNames
from host.features.mcp.feature import _check_agent_defaults, _check_readable
from mcp_client import McpConfig, parse_mcp_config


def _config(**servers: object) -> McpConfig:
    return parse_mcp_config(json.dumps({"mcpServers": servers}), {}, source="mcp.json")


def test_a_readonly_directory_never_shows_the_data_or_bot_directory(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "bot"
    for path in (home / "sub", cwd):
        path.mkdir(parents=True)
    for shown in (home, home / "sub", cwd):
        config = _config(t={"command": "x", "readonly": [str(shown)]})
        with pytest.raises(ConfigError, match=r"mcpServers\.t\.readonly: .* would show"):
            _check_readable(config, (home, cwd))
    # A directory holding them is fine: the sandbox covers a hidden directory inside a bind.
    _check_readable(_config(t={"command": "x", "readonly": [str(tmp_path)]}), (home, cwd))


def test_a_relative_readonly_directory_is_refused() -> None:
    with pytest.raises(ValueError, match="not an absolute path"):
        _config(t={"command": "x", "readonly": ["tools"]})


def test_defaults_name_servers_and_agents_that_exist(tmp_path: Path) -> None:
    registry = load_registry(None, secret_names=SecretNames())
    code = registry.get("code")
    assert code is not None
    with_default = AgentRegistry([*registry.entries(), replace(code, name="coder", mcp=("gh",))])
    with pytest.raises(ConfigError, match=r"\[agents\.coder\] mcp: no tool server named `gh`"):
        _check_agent_defaults(with_default, _config(tracker={"command": "x"}), tmp_path / "a.toml")
    stranger = _config(tracker={"command": "x", "agents": ["reserch"]})
    with pytest.raises(ConfigError, match=r"mcpServers\.tracker\.agents: no agent named `reserch`"):
        _check_agent_defaults(registry, stranger, tmp_path / "a.toml")
