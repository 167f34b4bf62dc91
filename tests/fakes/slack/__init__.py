"""A loopback fake Slack (Web API, files, response_url, Socket Mode) plus payload builders
and request signing, for driving the real slack_sdk / slack-bolt clients offline."""

from __future__ import annotations

from tests.fakes.slack import payloads
from tests.fakes.slack.server import (
    DEFAULT_SCOPES,
    Call,
    Envelope,
    FakeSlack,
    FaultKind,
    Hold,
    MethodResponder,
    ResponseUrlPost,
    SlashCommand,
)
from tests.fakes.slack.signing import command_body, form_body, json_body, sign
from tests.fakes.slack.status import StatusUpdate
from tests.fakes.slack.uploads import SharedFile

__all__ = [
    "DEFAULT_SCOPES",
    "Call",
    "Envelope",
    "FakeSlack",
    "FaultKind",
    "Hold",
    "MethodResponder",
    "ResponseUrlPost",
    "SharedFile",
    "SlashCommand",
    "StatusUpdate",
    "command_body",
    "form_body",
    "json_body",
    "payloads",
    "sign",
]
