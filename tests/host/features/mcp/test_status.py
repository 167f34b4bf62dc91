"""What `status` says of the tool servers (state and tool count; no reasons, which may name
the host's paths) and what the operator's log says of each server's first start."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import pytest

from core.ids import ConversationRef
from host.features.mcp.context import ToolServersContext
from host.features.mcp.feature import _report_starts
from host.features.mcp.status import ToolServerStatus
from host.runtime.turn import TurnContext
from mcp_client import McpServers, parse_mcp_config
from tests.host.features.mcp.test_tools import FAKE


async def test_status_names_each_server_and_the_log_says_why_one_did_not_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    servers = {
        "tracker": {"command": sys.executable, "args": [FAKE]},
        "broken": {"command": sys.executable, "args": [FAKE, "--fail-start"]},
    }
    config = parse_mcp_config(json.dumps({"mcpServers": servers}), {}, source="mcp.json")
    caplog.set_level(logging.INFO, logger="host.features.mcp.feature")
    async with McpServers(config) as manager:
        await asyncio.wait_for(_report_starts(manager), 30)
        conv = ConversationRef("console", "local", "c", "c")
        line = await ToolServerStatus(manager)(conv)
        told = await ToolServersContext(manager, {"tracker": ["research"]}).context(
            TurnContext(conv, "t1", "U1", "Ann")
        )
    assert line.startswith("Tool servers: `tracker` ready (8 tools), `broken` failed")
    assert "/" not in line.split("failed", 1)[1].replace("on the bot's host", "")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("MCP server broken did not start")
    assert "keep working" in warned[0]
    # The Host is told the same, by the tools' model-safe names and who has each server.
    assert "- `tracker`: `mcp__tracker__echo`" in told
    assert "agents that have it: `research`" in told
    assert "- `broken` (failed: no tools from it right now), for no agent" in told
