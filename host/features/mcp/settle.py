"""Waiting, boundedly, for a tool server still connecting (servers connect in the background
at start, so the first node after a start may find one not ready yet)."""

from __future__ import annotations

import asyncio

from mcp_client import McpServers, ServerState


async def settled_within(servers: McpServers, server: str, seconds: float) -> ServerState:
    """The server's state once it is ready or failed, or after `seconds` (still connecting)."""
    try:
        async with asyncio.timeout(seconds):
            return await servers.settled(server)
    except TimeoutError:
        return servers.state(server)
