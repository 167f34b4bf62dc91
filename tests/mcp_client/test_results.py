"""A call's content blocks as text for a model: every block in order, structured content when
there is no text, capped with a note."""

from __future__ import annotations

from mcp import types

from mcp_client.results import McpCallResult, result_text


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
    assert result_text(result, 1000).text == (
        "two issues\n[image: image/png]\n# A\n"
        "[resource: file:///b.bin (application/zip)]\n[resource link: https://x/c]"
    )


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
