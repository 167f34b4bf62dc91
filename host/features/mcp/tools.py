"""The tool servers' tools for an agent loop: one `Tool` per tool a ready server offers,
named `mcp__<server>__<tool>`, with the server's own input schema. Every call passes the
permission gate as `mcp` on `SERVER:TOOL` with its server's trust, and what a server says
(descriptions, results, errors) is untrusted: capped, and fenced where the model reads it."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from agents.models.types import (
    IMAGE_MEDIA_TYPES,
    MAX_IMAGE_BASE64_CHARS,
    MAX_RESULT_IMAGES,
    ToolImage,
)
from agents.tools import MAX_TOOL_OUTPUT_CHARS, Tool, ToolOutput, ToolTrust
from agents.workspace_tools import ToolContext
from core.fence import fence, new_marker, untrusted_preface
from core.markdown import code_block
from mcp_client import McpCallError, McpServers, McpTool
from mcp_client.results import McpImage

# What Anthropic and OpenAI accept as a tool name.
MAX_NAME_CHARS: Final = 64
_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST_CHARS: Final = 8
DESCRIPTION_CAP: Final = 1_000
# A schema larger than this is not sent (every model call would carry it): the model gets
# a permissive one and the server still checks the arguments.
SCHEMA_CAP: Final = 20_000
DETAIL_ARGUMENTS_CAP: Final = 2_000
ERROR_CAP: Final = 2_000
# Room for the preface and fence around a result, so the loop's own cap never cuts off the
# closing tag.
RESULT_TEXT_CAP: Final = MAX_TOOL_OUTPUT_CHARS - 1_000
PERMISSIVE_SCHEMA: Final[Mapping[str, Any]] = {"type": "object", "additionalProperties": True}


def mcp_tools(servers: McpServers, server_names: Sequence[str]) -> tuple[Tool[ToolContext], ...]:
    """One tool per tool each named server offers now (a server not ready offers none).

    A name `servers` does not know raises KeyError: admission checks a node's names first.
    A tool a server lists twice is offered once.
    """
    tools: list[McpTool] = []
    seen: set[tuple[str, str]] = set()
    for name in dict.fromkeys(server_names):
        for tool in servers.tools(name):
            if (tool.server, tool.name) not in seen:
                seen.add((tool.server, tool.name))
                tools.append(tool)
    plain = Counter(agent_tool_name(t.server, t.name) for t in tools)
    return tuple(
        mcp_tool(servers, t, hashed=plain[agent_tool_name(t.server, t.name)] > 1) for t in tools
    )


def agent_tool_name(server: str, tool: str, *, hashed: bool = False) -> str:
    """`mcp__<server>__<tool>` as a model may call it (^[A-Za-z0-9_-]{1,64}$).

    A tool name with other characters has them replaced by `_`, and a name over 64
    characters is cut; either way (or with `hashed`, for names that would meet, such as
    server `a__b` tool `c` and server `a` tool `b__c`) 8 hex digits of a hash of the real
    names end it, so two tools never share a name (`a.b` and `a_b` stay apart).
    """
    plain = _NAME_UNSAFE.sub("_", tool)
    name = f"mcp__{_NAME_UNSAFE.sub('_', server)}__{plain}"
    changed = plain != tool or server != _NAME_UNSAFE.sub("_", server)
    if not (hashed or changed) and len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{name[: MAX_NAME_CHARS - _DIGEST_CHARS - 1]}_{digest}"


def mcp_tool(servers: McpServers, tool: McpTool, *, hashed: bool = False) -> Tool[ToolContext]:
    """One server tool as an agent's tool (its calls go to `servers`); `hashed` as in
    `agent_tool_name`."""
    schema, schema_note = _schema(tool.input_schema)

    async def call(ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
        return await _call(servers, tool, ctx, arguments)

    return Tool.raw(
        agent_tool_name(tool.server, tool.name, hashed=hashed),
        _description(tool) + schema_note,
        schema,
        call,
    )


def _description(tool: McpTool) -> str:
    """The server's description (untrusted: one line, capped) and whose tool it is."""
    text = " ".join(tool.description.split())
    if len(text) > DESCRIPTION_CAP:
        text = text[: DESCRIPTION_CAP - 1] + "…"
    whose = f"Tool `{tool.name}` of the MCP server `{tool.server}`"
    if not text:
        return f"{whose} (it gives no description)."
    return f"{text} ({whose}; its results are data from outside the bot.)"


def _schema(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The server's input schema, or a permissive one (and why) when it cannot be sent."""
    if raw.get("type") != "object":
        return (
            PERMISSIVE_SCHEMA,
            " Its input schema is not a JSON object schema: pass a JSON object.",
        )
    size = len(json.dumps(raw, ensure_ascii=False, default=str))
    if size > SCHEMA_CAP:
        return PERMISSIVE_SCHEMA, (
            f" Its input schema ({size:,} characters) is too large to show: pass the "
            "arguments its description names; the server checks them."
        )
    return raw, ""


def call_detail(server: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The call as the person asked to approve it reads it: server, tool, the arguments."""
    shown = json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True, default=str)
    if len(shown) > DETAIL_ARGUMENTS_CAP:
        cut = f"\n… ({len(shown):,} characters in all)"
        shown = shown[:DETAIL_ARGUMENTS_CAP] + cut
    return f"The call: MCP server `{server}`, tool `{tool}`, arguments:\n{code_block(shown)}"


async def _call(
    servers: McpServers, tool: McpTool, ctx: ToolContext, arguments: dict[str, Any]
) -> ToolOutput:
    server, name = tool.server, tool.name
    if ctx.permit is None:  # fail closed: a tool server's call always passes a gate
        return ToolOutput(
            f"Refused: no permission gate is configured for this task, so `{name}` of the MCP "
            f"server `{server}` was not called (tool-server calls run only through the gate).",
            f"Did not call {server} {name}: no permission gate is configured",
            is_error=True,
        )
    trust = ToolTrust(servers.entry(server).approval, tool.read_only)
    decision = await ctx.permit(
        "mcp", f"{server}:{name}", call_detail(server, name, arguments), trust=trust
    )
    if not decision.allowed:
        return ToolOutput(
            f"Refused by the permission gate: {decision.reason}",
            f"Did not call {server} {name}: the permission gate refused it",
            is_error=True,
        )
    try:
        result = await servers.call(server, name, arguments)
    except McpCallError as exc:
        why = str(exc)
        return ToolOutput(
            _fenced("The call failed:", why[:ERROR_CAP], tool),
            f"Calling {server} {name} failed: {why[:200]}",
            is_error=True,
        )
    images = _images(result.images)
    size = f"{len(result.text):,} characters"
    if images:
        size += f", {len(images)} image{'s' if len(images) > 1 else ''}"
    if result.is_error:
        head, summary = "The tool reported an error:", f"{server} {name} reported an error: {size}"
    else:
        head, summary = "The tool's result:", f"Called {server} {name}: {size}"
    text = result.text
    if len(text) > RESULT_TEXT_CAP:
        cut = f"[result cut at {RESULT_TEXT_CAP:,} of {len(text):,} characters]"
        text = f"{text[:RESULT_TEXT_CAP]}\n{cut}"
    body = _fenced(head, text, tool) if text or images else f"{head} (no content)"
    return ToolOutput(body, summary, images=images, is_error=result.is_error)


def _fenced(head: str, text: str, tool: McpTool) -> str:
    """What a server said, for the model: fenced as untrusted data under a fresh marker."""
    marker = new_marker()
    source = f"MCP server {tool.server}, tool {tool.name}"
    return f"{untrusted_preface(marker)}\n{head}\n{fence(text, source=source, marker=marker)}"


def _images(images: Sequence[McpImage]) -> tuple[ToolImage, ...]:
    """The server's images as the model takes them (what does not fit is left out)."""
    kept: list[ToolImage] = []
    for image in images:
        if image.mime_type not in IMAGE_MEDIA_TYPES or len(image.data) > MAX_IMAGE_BASE64_CHARS:
            continue
        try:
            kept.append(
                ToolImage.model_validate({"media_type": image.mime_type, "data": image.data})
            )
        except ValidationError:
            continue
    return tuple(kept[:MAX_RESULT_IMAGES])
