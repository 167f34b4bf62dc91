"""A tool call's result as text for a model: every content block in order, structured content
when there is no text, capped in size (a server's answer is untrusted and may be huge)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mcp import types


@dataclass(frozen=True)
class McpCallResult:
    """One call's outcome. `is_error` is the server saying the tool failed (its text says
    why); `truncated` says the text was cut to the cap."""

    text: str
    is_error: bool = False
    truncated: bool = False


def result_text(result: types.CallToolResult, cap: int) -> McpCallResult:
    parts = [_block_text(block) for block in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(part for part in parts if part)
    truncated = len(text) > cap
    if truncated:
        text = f"{text[:cap]}\n[result cut at {cap:,} of {len(text):,} characters]"
    return McpCallResult(text=text, is_error=result.is_error, truncated=truncated)


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource: {resource.uri} ({resource.mime_type or 'binary'})]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri}]"
    return ""
