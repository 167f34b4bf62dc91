"""A call's content blocks as text for a model: every block in order, structured content when
there is no text, capped with a note; images kept apart for the model, within their caps."""

from __future__ import annotations

from mcp import types

from mcp_client.results import (
    MAX_IMAGE_BASE64_CHARS,
    MAX_IMAGES,
    McpCallResult,
    McpImage,
    result_text,
)


def test_every_kind_of_block_becomes_a_line() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(text="two issues"),
            types.ImageContent(data="aGk=", mime_type="image/png"),
            types.EmbeddedResource(
                resource=types.TextResourceContents(uri="file:///a.md", text="# A")
            ),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="file:///b.bin", blob="AA==", mime_type="application/zip"
                )
            ),
            types.ResourceLink(uri="https://x/c", name="c"),
        ]
    )
    converted = result_text(result, 1000)
    assert converted.text == (
        "two issues\n[image 1: image/png, attached]\n# A\n"
        "[resource: file:///b.bin (application/zip)]\n[resource link: https://x/c]"
    )
    assert converted.images == (McpImage(mime_type="image/png", data="aGk="),)


def test_structured_content_stands_in_for_missing_text() -> None:
    result = types.CallToolResult(content=[], structured_content={"open": 2, "title": "é"})
    assert result_text(result, 1000) == McpCallResult(text='{"open": 2, "title": "é"}')


def test_the_cap_counts_the_whole_text() -> None:
    result = types.CallToolResult(
        content=[types.TextContent(text="ab"), types.TextContent(text="cd")]
    )
    assert result_text(result, 3) == McpCallResult(
        text="ab\n\n[result cut at 3 of 5 characters]", truncated=True
    )


def test_images_beyond_the_caps_are_named_not_attached() -> None:
    png = types.ImageContent(data="aGk=", mime_type="image/png")
    result = types.CallToolResult(
        content=[
            types.ImageContent(data="PHN2Zz4=", mime_type="image/svg+xml"),
            types.ImageContent(data="not base64!", mime_type="image/jpeg"),
            types.ImageContent(data="", mime_type="image/gif"),
            types.ImageContent(data="A" * (MAX_IMAGE_BASE64_CHARS + 4), mime_type="image/png"),
            *[png] * (MAX_IMAGES + 1),
        ]
    )
    converted = result_text(result, 100_000)
    lines = converted.text.splitlines()
    assert lines[0].startswith("[image: image/svg+xml, not shown: only image/gif, ")
    assert lines[1] == "[image: image/jpeg, not shown: its data is not valid base64]"
    assert lines[2] == "[image: image/gif, not shown: it is empty]"
    assert lines[3].startswith("[image: image/png, not shown: 2,000,004 characters of base64")
    assert lines[4:-1] == [f"[image {n}: image/png, attached]" for n in range(1, MAX_IMAGES + 1)]
    assert lines[-1] == f"[image: image/png, not shown: a result shows at most {MAX_IMAGES} images]"
    assert converted.images == (McpImage("image/png", "aGk="),) * MAX_IMAGES
