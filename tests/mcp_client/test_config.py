"""mcp.json: the mcpServers shape teams paste, raven-bot's extras, `${VAR}` secrets, and one
clear error per broken file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_client import (
    HttpServerEntry,
    McpConfigError,
    StdioServerEntry,
    load_mcp_config,
    parse_mcp_config,
)


def parse(servers: object, environ: dict[str, str] | None = None) -> object:
    return parse_mcp_config(json.dumps({"mcpServers": servers}), environ or {}, source="mcp.json")


def error(servers: object, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(McpConfigError) as caught:
        parse(servers, environ)
    return str(caught.value)


def test_a_missing_file_means_no_servers(tmp_path: Path) -> None:
    assert load_mcp_config(tmp_path / "mcp.json", {}).servers == {}


def test_the_pasted_shape_with_extras(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-github"],
                        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"},
                        "tools": {"include": ["get_*", "list_*"], "exclude": ["get_secret"]},
                        "approval": "smart",
                        "agents": ["coder"],
                        "network": True,
                        "timeout": 45,
                    },
                    "docs": {
                        "type": "http",
                        "url": "https://docs.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${DOCS_KEY}"},
                    },
                    "cursor-style": {"url": "https://tracker.example.com/mcp"},
                }
            }
        )
    )
    config = load_mcp_config(path, {"GITHUB_TOKEN": "ghp_1", "DOCS_KEY": "k2"})

    github = config.servers["github"]
    assert isinstance(github, StdioServerEntry)
    assert github.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_1"}
    assert (github.approval, github.agents, github.network, github.timeout) == (
        "smart",
        ["coder"],
        True,
        45,
    )
    assert github.tools.allows("get_issue") and github.tools.allows("list_prs")
    assert not github.tools.allows("get_secret") and not github.tools.allows("create_issue")
    docs = config.servers["docs"]
    assert isinstance(docs, HttpServerEntry)
    assert docs.headers == {"Authorization": "Bearer k2"}
    assert (docs.approval, docs.agents, docs.timeout, docs.allow_private_network) == (
        "ask",
        [],
        30,
        False,
    )
    assert isinstance(config.servers["cursor-style"], HttpServerEntry)
    # Expanded secrets stay out of reprs (logs, tracebacks).
    assert "ghp_1" not in repr(config) and "k2" not in repr(config)


def test_a_wrong_value_names_the_file_and_key() -> None:
    assert error({"github": {"command": "x", "approval": "yes"}}) == (
        "mcp.json: mcpServers.github.approval: Input should be 'ask', 'smart' or 'auto' (got 'yes')"
    )


def test_an_unknown_key_lists_the_keys_there() -> None:
    assert error({"github": {"command": "x", "enviroment": {}}}) == (
        "mcp.json: mcpServers.github.enviroment: unknown key; the keys here are: tools,"
        " approval, agents, timeout, command, args, env, network, readonly, type"
    )
    assert error({"github": {"command": "x", "tools": {"only": ["a"]}}}) == (
        "mcp.json: mcpServers.github.tools.only: unknown key; the keys here are: include, exclude"
    )
    assert error({"docs": {"type": "http", "url": "https://x", "network": True}}) == (
        "mcp.json: mcpServers.docs.network: unknown key; the keys here are: tools, approval,"
        " agents, timeout, url, headers, allow_private_network, type"
    )


def test_missing_and_out_of_bounds_fields() -> None:
    assert error({"docs": {"type": "http"}}) == "mcp.json: mcpServers.docs.url: missing; add it"
    assert error({"docs": {"type": "http", "url": "ftp://x"}}) == (
        "mcp.json: mcpServers.docs.url: Value error, must be an http:// or https:// URL"
        " (got 'ftp://x')"
    )
    assert error({"s": {"command": "x", "timeout": 3600}}) == (
        "mcp.json: mcpServers.s.timeout: Input should be less than or equal to 600 (got 3600)"
    )
    assert error({"s": {"type": "sse", "url": "https://x"}}) == (
        "mcp.json: mcpServers.s.type: should be 'stdio' or 'http' (got 'sse')"
    )


def test_server_names_become_tool_name_parts() -> None:
    assert error({"GitHub": {"command": "x"}}) == (
        "mcp.json: mcpServers.GitHub: server name should be 1-40 lowercase letters, digits,"
        " '-' or '_', starting with a letter or digit"
    )
    assert error({"a" * 41: {"command": "x"}}).startswith(f"mcp.json: mcpServers.{'a' * 41}:")


def test_an_undefined_variable_names_the_server_and_key() -> None:
    assert error({"github": {"command": "x", "env": {"TOKEN": "${GITHUB_TOKEN}"}}}) == (
        "mcp.json: mcpServers.github.env.TOKEN: ${GITHUB_TOKEN} is not set;"
        " add it to the bot's .env or environment"
    )
    assert error(
        {"docs": {"type": "http", "url": "https://x", "headers": {"X-Key": "k-${KEY}"}}}
    ) == (
        "mcp.json: mcpServers.docs.headers.X-Key: ${KEY} is not set;"
        " add it to the bot's .env or environment"
    )


def test_bad_json_and_wrong_shapes(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": "x",}}}')
    with pytest.raises(McpConfigError) as caught:
        load_mcp_config(path, {})
    assert str(caught.value) == (
        f"{path}: not valid JSON at line 1 column 38: Expecting property name enclosed in"
        " double quotes"
    )
    with pytest.raises(McpConfigError, match=r"^mcp.json: servers: unknown key; the only key"):
        parse_mcp_config('{"servers": {}}', {}, source="mcp.json")
    assert error([]) == "mcp.json: mcpServers: should be an object of servers by name"
    assert (
        error({"a": "npx"}) == "mcp.json: mcpServers.a: should be an object with a command or a url"
    )
