"""Slack event payloads → normalized inbound messages (no network calls here)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from host.runtime.messages import Attachment, InboundMessage

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
IGNORED_SUBTYPES = frozenset(
    {
        "message_changed",
        "message_deleted",
        "message_replied",
        "channel_join",
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "thread_broadcast_deleted",
        "bot_add",
        "bot_remove",
        "ekm_access_denied",
        "group_join",
        "group_leave",
    }
)
DM_THREAD = "main"


@dataclass(frozen=True)
class SlackEvent:
    """The parts of a Slack message event the adapter needs."""

    team: str
    channel: str
    user: str
    text: str
    ts: str
    thread_ts: str | None
    is_dm: bool
    event_id: str
    client_msg_id: str | None
    bot_id: str | None
    subtype: str | None
    files: tuple[dict[str, Any], ...]

    @property
    def thread_root(self) -> str:
        """Conversation thread: the thread, or a new thread rooted here (DMs: one thread)."""
        if self.thread_ts:
            return self.thread_ts
        return DM_THREAD if self.is_dm else self.ts


def parse_event(body: dict[str, Any], event: dict[str, Any]) -> SlackEvent:
    """Pull the fields out of an event callback."""
    team = str(body.get("team_id") or event.get("team") or "T")
    channel_type = event.get("channel_type")
    channel = str(event.get("channel", ""))
    return SlackEvent(
        team=team,
        channel=channel,
        user=str(event.get("user", "")),
        text=str(event.get("text", "")),
        ts=str(event.get("ts", "")),
        thread_ts=event.get("thread_ts"),
        is_dm=channel_type == "im" or channel.startswith("D"),
        event_id=str(body.get("event_id") or f"{channel}:{event.get('ts', '')}"),
        client_msg_id=event.get("client_msg_id"),
        bot_id=event.get("bot_id"),
        subtype=event.get("subtype"),
        files=tuple(event.get("files") or ()),
    )


def strip_bot_mention(text: str, bot_user_id: str | None) -> str:
    """Remove mentions of the bot itself (the Host is addressed, not named)."""
    if not bot_user_id:
        return text.strip()
    return re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s*[:,]?", "", text).strip()


def mentioned_users(text: str) -> list[str]:
    """User ids mentioned in a message."""
    return _MENTION.findall(text)


def mentions(text: str, user_id: str | None) -> bool:
    """True when `text` mentions `user_id`."""
    return bool(user_id) and user_id in mentioned_users(text)


def replace_mentions(text: str, names: dict[str, str]) -> str:
    """`<@U123>` → `@name` for the Host (ids it cannot read become `@U123`)."""
    return _MENTION.sub(lambda m: f"@{names.get(m.group(1), m.group(1))}", text)


# Slack's message text: `<…>` tokens (mentions, channels, special mentions, links) and the
# three escaped characters; see api.slack.com "Formatting text for app surfaces".
_TOKEN_OR_ENTITY = re.compile(r"<([^<>\n]*)>|&(lt|gt|amp);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&"}


def plain_text(text: str, names: dict[str, str]) -> str:
    """Slack's message text as its author typed it: `&lt;`/`&gt;`/`&amp;` unescaped (so
    `echo a > b` stays a redirect), `<@U123>` → `@name` (`@U123` when unknown), `<#C1|dev>`
    → `#dev`, `<!here>` → `@here`, and an auto-linked `<https://x.io|x.io>` → what was
    typed. One pass, so an escaped `&lt;@U1&gt;` the author typed stays literal text."""

    def plain(match: re.Match[str]) -> str:
        if match[2] is not None:
            return _ENTITIES[match[2]]
        target, _, label = match[1].partition("|")
        if target.startswith("@"):
            return "@" + names.get(target[1:], target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return label or "@" + target[1:].split("^", 1)[0]
        return label or target.removeprefix("mailto:")

    return _TOKEN_OR_ENTITY.sub(plain, text)


def to_inbound(ev: SlackEvent, *, text: str, author_name: str) -> InboundMessage:
    """The normalized message; dedup keys cover the event id and the message itself."""
    extra = [f"msg:{ev.channel}:{ev.ts}"]
    if ev.client_msg_id:
        extra.append(f"client:{ev.client_msg_id}")
    attachments = tuple(
        Attachment(
            name=str(f.get("name") or f.get("title") or f.get("id") or "file")[:255],
            size=int(f.get("size") or 0),
            url=f.get("url_private_download") or f.get("url_private"),
            mime_type=f.get("mimetype"),
        )
        for f in ev.files
        if f.get("mode") != "tombstone"
    )
    return InboundMessage(
        platform="slack",
        workspace=ev.team,
        channel=ev.channel,
        thread=ev.thread_root,
        message_id=ev.ts,
        author_id=ev.user,
        author_name=author_name[:128] or ev.user,
        text=text[:40_000],
        attachments=attachments,
        event_id=ev.event_id,
        extra_event_ids=tuple(extra),
        is_dm=ev.is_dm,
    )
