"""Normalized inbound and outbound messages: what every channel adapter produces and consumes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.ids import ConversationRef
from host.runtime.turn import TurnOrigin

MAX_INBOUND_CHARS = 40_000
# Who system turns were recorded as before messages carried an origin (read-only, legacy).
_LEGACY_SYSTEM_AUTHOR = "raven-system"


class Attachment(BaseModel):
    """A file the user shared: name, size, and a url or a local path once downloaded."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=255)
    size: int = Field(ge=0)
    url: str | None = None
    local_path: Path | None = None
    mime_type: str | None = None


class InboundMessage(BaseModel):
    """One message for the bot (addressed to it, or said in a thread it takes part in),
    platform details removed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    platform: str = Field(min_length=1, max_length=32)
    workspace: str = Field(min_length=1, max_length=128)
    channel: str = Field(min_length=1, max_length=128)
    thread: str = Field(min_length=1, max_length=128, description="thread root id")
    message_id: str = Field(min_length=1, max_length=128)
    author_id: str = Field(min_length=1, max_length=128)
    author_name: str = Field(min_length=1, max_length=128)
    text: str = Field(max_length=MAX_INBOUND_CHARS)
    attachments: tuple[Attachment, ...] = ()
    event_id: str = Field(min_length=1, max_length=256)
    extra_event_ids: tuple[str, ...] = Field(
        default=(), description="other ids of the same event (e.g. Slack client_msg_id)"
    )
    timestamp: float = Field(default_factory=time.time)
    is_dm: bool = False
    # The author's roles where the platform has them (Discord role ids): machines.toml may
    # open a machine to a role.
    roles: tuple[str, ...] = ()
    context: str = Field(
        default="", description="recent thread messages by other people, labelled by author"
    )
    reread_thread: bool = Field(
        default=False, description="an explicit mention in a thread: re-read it before the turn"
    )
    # Payloads recorded before this field existed read as addressed: then every message the
    # bot took in was answered.
    addressed: bool = Field(
        default=True,
        description="the message mentions the bot, is a DM or comes from the console; False "
        "for a reply in one of its threads that does not mention it",
    )
    origin: TurnOrigin = Field(
        default="user", description="set to `system` only by the core, for its own turns"
    )
    task: str = Field(
        default="", max_length=64, description="set only by the core: the task a turn fires"
    )

    @property
    def conversation(self) -> ConversationRef:
        """The conversation key (platform, workspace, channel, thread root)."""
        return ConversationRef(self.platform, self.workspace, self.channel, self.thread)

    @property
    def dedup_keys(self) -> list[str]:
        """Every key under which this event must be processed at most once."""
        keys = [f"{self.platform}:event:{self.event_id}"]
        keys += [f"{self.platform}:event:{extra}" for extra in self.extra_event_ids if extra]
        return keys


def stored_inbound(payload: str) -> InboundMessage:
    """An inbound message as recorded in the log (payloads of older versions included)."""
    data: dict[str, Any] = json.loads(payload)
    # Recorded before messages carried an origin, when the author id alone marked the bot's
    # own turns. Only stored payloads get this reading: a platform never sets the origin.
    if "origin" not in data and data.get("author_id") == _LEGACY_SYSTEM_AUTHOR:
        data["origin"] = "system"
    return InboundMessage.model_validate(data)


class ChartSeries(BaseModel):
    """One line of a chart: a value per category (None where it has none yet)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    values: tuple[float | None, ...]


class ChartData(BaseModel):
    """A small line chart a message may carry for platforms that draw charts themselves
    (Slack's chart block); plain data, never a platform's JSON. The message's text says the
    same in words, and is all that other platforms show."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    title: str = Field(min_length=1, max_length=200)
    x_label: str = Field(default="", max_length=200)
    y_label: str = Field(default="", max_length=200)
    categories: tuple[str, ...] = Field(min_length=1, description="the x axis, in order")
    series: tuple[ChartSeries, ...] = Field(min_length=1)


class OutboundMessage(BaseModel):
    """Something the bot says: Markdown text into a conversation's thread."""

    model_config = ConfigDict(frozen=True)
    text: str
    idempotency_key: str = Field(min_length=1)
    ephemeral_to: str | None = None
    redelivery: bool = Field(
        default=False, description="resent after a crash: the platform may already have it"
    )
    chart: ChartData | None = Field(
        default=None, description="drawn natively where the platform can; the text stays"
    )


class OutboundFile(BaseModel):
    """A file the bot attaches to a conversation's thread: shown as `name`, read from `path`
    on the bot's host (checked to be a regular file reached without links) when it is sent."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=255, description="what people see")
    path: Path = Field(description="absolute path on the bot's host; never shown in chat")
    size: int = Field(ge=0)
    content_type: str = Field(default="application/octet-stream", max_length=255)

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        if not path.is_absolute():
            raise ValueError(f"an attached file's path must be absolute, not {path}")
        return path
