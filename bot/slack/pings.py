"""Outgoing Slack text never pings anyone: `<!channel>`, `<!here>`, `<!subteam^…>`, user
mentions and bare `@channel`/`@here`/`@everyone` are made inert, in text, blocks and views."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bot.render.split import ZWSP, neutralize_broadcasts

__all__ = ["neutralize_slack_args", "neutralize_slack_pings"]

# Every "<!…>" special except a date (`<!date^1700000000^{time}|…>`), which pings nobody.
_SPECIAL_MENTION = re.compile(r"<!(?!date\^\d+\^)([^<>]*)>")
# A user mention pings that person; the bot never means to, so none survives (its label, or
# the id, is shown as plain `@text`).
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^<>]*))?>")
# Web API arguments and Block Kit keys whose string values Slack displays.
_DISPLAYED_ARGS = frozenset({"text", "blocks", "attachments", "view"})
_DISPLAYED_KEYS = frozenset({"text", "fallback", "pretext", "title", "footer", "author_name"})


def neutralize_slack_pings(text: str) -> str:
    """Make <!channel>/<!here>/<!everyone>/<!subteam^…>, user mentions (<@U123>, shown as
    `@U123` or `@label`) and bare @channel etc. inert.

    Idempotent and safe on converted mrkdwn.
    """
    # Every "<!...>" special is escaped so Slack shows it literally; none should come from
    # the model, and a blanket rule also covers forms like "<!here|here>".
    text = _SPECIAL_MENTION.sub(lambda m: f"&lt;!{m[1]}&gt;", text)
    text = _USER_MENTION.sub(lambda m: f"@{m[2] or m[1]}", text)
    return neutralize_broadcasts(text)


def _neutralize_plain(text: str) -> str:
    # plain_text never pings, but is shown verbatim: break "<!" rather than escaping it.
    text = _USER_MENTION.sub(lambda m: f"@{m[2] or m[1]}", text)
    return neutralize_broadcasts(text.replace("<!", "<" + ZWSP + "!"))


def _neutralize_value(value: Any, *, plain: bool) -> Any:
    if isinstance(value, str):
        return _neutralize_plain(value) if plain else neutralize_slack_pings(value)
    if isinstance(value, list):
        return [_neutralize_value(item, plain=plain) for item in value]
    if isinstance(value, Mapping):
        is_plain = value.get("type") == "plain_text"
        return {
            key: (
                _neutralize_value(item, plain=is_plain)
                if key in _DISPLAYED_KEYS or not isinstance(item, str)
                else item
            )
            for key, item in value.items()
        }
    return value


def neutralize_slack_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Web API arguments with every displayed string made ping-free: `text` and each text
    field inside `blocks`, `attachments` and `view` (ids, values and metadata untouched).

    The Slack adapter sends every call through this, so no outgoing string bypasses it.
    """
    return {
        key: _neutralize_value(value, plain=False) if key in _DISPLAYED_ARGS else value
        for key, value in args.items()
    }
