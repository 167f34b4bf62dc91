"""A tool-server call written as text, `SERVER TOOL {"json": "arguments"}`: the task of an
`mcp` node, exactly what its approval shows and what runs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

SYNTAX = '`SERVER TOOL {"argument": "value"}` (the JSON object may be left out: no arguments)'
_HEAD = re.compile(r"^\s*(?P<server>[a-z0-9][a-z0-9_-]{0,39})\s+(?P<tool>[^\s{]+)\s*(?P<rest>.*)$")


class CallTextError(ValueError):
    """The text is not a tool call; the message says what is wrong and shows the syntax."""


@dataclass(frozen=True)
class ToolCallText:
    """One call: the server, the tool and its arguments."""

    server: str
    tool: str
    arguments: dict[str, Any]

    def shown(self) -> str:
        """The call as people read it in an approval (arguments as compact JSON)."""
        args = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        return f"{self.server} {self.tool} {args}"


def parse_call(text: str) -> ToolCallText:
    """The call written as `text`; `CallTextError` says what is wrong."""
    match = _HEAD.match(text.strip())
    if match is None:
        raise CallTextError(f"an `mcp` node's task is one tool call, written {SYNTAX}")
    rest = match["rest"].strip()
    arguments: Any = {}
    if rest:
        try:
            arguments = json.loads(rest)
        except json.JSONDecodeError as exc:
            raise CallTextError(
                f"the arguments of `{match['server']} {match['tool']}` are not valid JSON "
                f"({exc.msg} at character {exc.pos + 1}); write them as one JSON object, "
                'e.g. {"query": "flaky test"}'
            ) from None
    if not isinstance(arguments, dict):
        raise CallTextError(
            f"the arguments of `{match['server']} {match['tool']}` must be a JSON object "
            '({"name": value, …}), not ' + type(arguments).__name__
        )
    return ToolCallText(match["server"], match["tool"], arguments)
