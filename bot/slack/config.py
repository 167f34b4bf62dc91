"""What the Slack adapter needs from Settings, and how Slack's failures are classified."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)

# auth.test errors no retry can fix: the token itself is wrong.
TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
# Slack errors that trying again cannot fix (the outbox does not retry these).
PERMANENT_ERRORS = TOKEN_ERRORS | {
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "msg_too_long",
    "no_text",
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_arguments",
    "missing_scope",
    "no_permission",
    "restricted_action",
    "cant_update_message",
    "message_not_found",
    "edit_window_closed",
    "user_not_in_channel",
    "user_not_found",
}
# Failures that mean "Slack is unreachable or unwell right now", logged without a traceback.
UNREACHABLE = (aiohttp.ClientError, OSError, TimeoutError, SlackApiError)


@dataclass(frozen=True)
class SlackConfig:
    """Everything the adapter needs from Settings."""

    bot_token: str
    app_token: str | None = None
    signing_secret: str | None = None
    api_url: str = "https://slack.com/api/"
    http_host: str = "0.0.0.0"
    http_port: int = 3000
    http_path: str = "/slack/events"
    thread_replies: bool = True
    allow_bots: bool = False
    attachment_max_bytes: int = 20_000_000
    thread_context_messages: int = 20
    rate_limit_retries: int = 3
    socket_ping_interval: float = 10.0
    # Backoff while Slack is unreachable at startup: doubles from `initial` up to `max`.
    connect_retry_initial: float = 1.0
    connect_retry_max: float = 60.0

    @property
    def transport(self) -> str:
        """`socket` with an app token, else `http` with a signing secret."""
        if self.app_token:
            return "socket"
        if self.signing_secret:
            return "http"
        raise ValueError(
            "SLACK_BOT_TOKEN is set but neither SLACK_APP_TOKEN (Socket Mode) nor "
            "SLACK_SIGNING_SECRET (HTTP Events API) is: set one of them."
        )


def retry_handlers(rate_limit_retries: int) -> list[AsyncRetryHandler]:
    """Connection errors, 429 (honouring Retry-After) and 5xx are retried idempotently."""
    return [
        AsyncConnectionErrorRetryHandler(max_retry_count=2),
        AsyncRateLimitErrorRetryHandler(max_retry_count=rate_limit_retries),
        AsyncServerErrorRetryHandler(max_retry_count=2),
    ]


def unreachable_reason(exc: BaseException) -> str:
    """Why Slack could not be reached, in one line (no traceback)."""
    if isinstance(exc, SlackApiError):
        return f"Slack answered {exc.response.get('error') or exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def clock_in(delay: float) -> str:
    """The wall-clock time `delay` seconds from now, for "retrying at" log lines."""
    return time.strftime("%H:%M:%S", time.localtime(time.time() + delay))
