"""A tool call's result for a model: every content block in order as text, structured content
when there is no text, capped in size (a server's answer is untrusted and may be huge); images
ride apart, as base64 for the model's image blocks, capped in number and size."""

from __future__ import annotations

import binascii
import json
from base64 import b64decode
from dataclasses import dataclass
from typing import Final

from mcp import types

# What models take as an image in a tool result, and how much of it one result may carry
# (every later model call of the run sends it again).
IMAGE_MIME_TYPES: Final = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
MAX_IMAGES: Final = 4
MAX_IMAGE_BASE64_CHARS: Final = 2_000_000  # about 1.5 MB of image


@dataclass(frozen=True)
class McpImage:
    """An image a tool returned: its MIME type and its data, checked to be base64."""

    mime_type: str
    data: str


@dataclass(frozen=True)
class McpCallResult:
    """One call's outcome. `is_error` is the server saying the tool failed (its text says
    why); `truncated` says the text was cut to the cap; `images` are the image blocks the
    text's `[image N: …]` lines stand for, in order."""

    text: str
    is_error: bool = False
    truncated: bool = False
    images: tuple[McpImage, ...] = ()


def result_text(result: types.CallToolResult, cap: int) -> McpCallResult:
    images: list[McpImage] = []
    parts = [_block_text(block, images) for block in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(part for part in parts if part)
    truncated = len(text) > cap
    if truncated:
        text = f"{text[:cap]}\n[result cut at {cap:,} of {len(text):,} characters]"
    return McpCallResult(
        text=text, is_error=result.is_error, truncated=truncated, images=tuple(images)
    )


def _block_text(block: types.ContentBlock, images: list[McpImage]) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return _image(block, images)
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


def _image(block: types.ImageContent, images: list[McpImage]) -> str:
    """Keeps the image for the model when it fits the caps; the line says which it was."""
    mime = " ".join(block.mime_type.split())[:100]
    why = _unusable(block, len(images))
    if why is not None:
        return f"[image: {mime}, not shown: {why}]"
    images.append(McpImage(mime_type=block.mime_type, data=block.data))
    return f"[image {len(images)}: {mime}, attached]"


def _unusable(block: types.ImageContent, kept: int) -> str | None:
    if block.mime_type not in IMAGE_MIME_TYPES:
        return f"only {', '.join(sorted(IMAGE_MIME_TYPES))} are shown to the model"
    if kept >= MAX_IMAGES:
        return f"a result shows at most {MAX_IMAGES} images"
    if not block.data:
        return "it is empty"
    if len(block.data) > MAX_IMAGE_BASE64_CHARS:
        return (
            f"{len(block.data):,} characters of base64 is over the cap of "
            f"{MAX_IMAGE_BASE64_CHARS:,}"
        )
    try:
        b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return "its data is not valid base64"
    return None
