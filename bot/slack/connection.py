"""The Slack connection's lifecycle: auth.test with backoff, the bolt app, Socket Mode or
the HTTP Events API, and an orderly stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blocks import MODAL_CALLBACK
from bot.slack.config import (
    TOKEN_ERRORS,
    SlackConfig,
    clock_in,
    retry_handlers,
    unreachable_reason,
)
from bot.slack.edge import SlackEdge
from bot.slack.event_log import SlackEventLog
from bot.slack.identity import SlackIdentity
from bot.slack.ingress import SlackIngress
from bot.slack.interactions import SlackInteractions
from bot.slack.sdk_log import SdkLog

log = logging.getLogger(__name__)
# Web API calls in flight at once per host: a reply, the thread's status and a lookup may
# overlap; more wait for a free keep-alive connection instead of opening another.
WEB_API_CONNECTIONS = 4


@dataclass(frozen=True)
class Listeners:
    """What the bolt app dispatches to."""

    events: SlackIngress
    interactions: SlackInteractions


class SlackConnection:
    """One serve's connection to Slack, from auth.test to teardown.

    `closed` is the adapter's: setting it ends the backoff and `wait_closed`.
    """

    def __init__(
        self,
        config: SlackConfig,
        client: AsyncWebClient,
        sdk_log: SdkLog,
        identity: SlackIdentity,
        closed: asyncio.Event,
        event_log: Path,
    ) -> None:
        self._config = config
        # The HTTP edge's queue of acknowledged events (opened only when serving HTTP).
        self._event_log = event_log
        self._events: SlackEventLog | None = None
        self._client = client
        self._sdk_log = sdk_log
        self._identity = identity
        self._closed = closed
        self._auth: AuthorizeResult | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._edge: SlackEdge | None = None
        self.http_port: int | None = None

    def open_session(self) -> None:
        """One keep-alive session for every Web API call: without it the SDK opens (and in
        production TLS-handshakes) a connection per call. Closed in `stop`; a call made
        after that (an outbox drain at shutdown) gets the SDK's session-per-call fallback."""
        self._client.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._client.timeout),
            connector=aiohttp.TCPConnector(limit_per_host=WEB_API_CONNECTIONS),
        )

    async def authenticate(self) -> bool:
        """auth.test until it answers (False: closed first); a bad token raises at once.

        While Slack is unreachable this logs one line per attempt with the next retry time.
        """
        delay = self._config.connect_retry_initial
        while not self._closed.is_set():
            try:
                resp = await self._client.auth_test()
            except SlackApiError as exc:
                error = str(exc.response.get("error") or "")
                if error in TOKEN_ERRORS:
                    raise RuntimeError(
                        f"Slack rejected SLACK_BOT_TOKEN ({error}): check the token"
                    ) from None
                reason = unreachable_reason(exc)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                reason = unreachable_reason(exc)
            else:
                self._auth = AuthorizeResult.from_auth_test_response(
                    auth_test_response=resp, bot_token=self._config.bot_token
                )
                self._identity.seen(resp.get("user_id"))
                log.info("slack: authenticated as %s in %s", resp.get("user"), resp.get("team"))
                return True
            log.warning(
                "slack: cannot reach the Slack API at %s (%s); retrying at %s (in %gs)",
                self._config.api_url,
                reason,
                clock_in(delay),
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), delay)
            delay = min(delay * 2, self._config.connect_retry_max)
        return False

    async def _authorize(self) -> AuthorizeResult:
        """bolt's authorization: the identity found by `authenticate` before serving."""
        if self._auth is None:  # not reached in `serve`, which authenticates first
            resp = await self._client.auth_test()
            self._auth = AuthorizeResult.from_auth_test_response(
                auth_test_response=resp, bot_token=self._config.bot_token
            )
        return self._auth

    def build_app(self, listeners: Listeners) -> AsyncApp:
        """The bolt app with every listener registered (built inside the running loop)."""

        async def authorize() -> AuthorizeResult:
            return await self._authorize()

        app = AsyncApp(
            # Tokenless: each request's client gets the token from `authorize` (bolt warns
            # about a token it would ignore otherwise).
            client=AsyncWebClient(
                base_url=self._config.api_url,
                retry_handlers=retry_handlers(self._config.rate_limit_retries),
                logger=self._sdk_log,
            ),
            signing_secret=self._config.signing_secret or "",
            # Over HTTP the edge verified each request already (and an event handed over
            # after a restart may be older than the signature's five minutes).
            request_verification_enabled=self._config.transport != "http",
            # Ack after the listener, which only persists: "persist before you announce".
            process_before_response=True,
            # The startup auth.test, reused: no request waits on a Web API call before its ack.
            authorize=authorize,
        )
        app.event("app_mention")(listeners.events.on_mention)
        app.event("message")(listeners.events.on_message)
        app.action(re.compile(r"^prompt:"))(listeners.interactions.on_action)
        app.view(MODAL_CALLBACK)(listeners.interactions.on_view)
        return app

    async def start(self, app: AsyncApp) -> None:
        """Connect Socket Mode (with an app token) or start the HTTP endpoint."""
        if self._config.transport == "socket":
            assert self._config.app_token is not None
            self._socket = AsyncSocketModeHandler(
                app,
                app_token=self._config.app_token,
                logger=self._sdk_log,
                ping_interval=self._config.socket_ping_interval,
            )
            await self._socket.connect_async()  # type: ignore[no-untyped-call]
        else:
            await self._start_http(app)

    async def _start_http(self, app: AsyncApp) -> None:
        self._events = SlackEventLog(self._event_log)
        self._edge = SlackEdge(self._config, app, self._events)
        await self._edge.start()
        self.http_port = self._edge.port

    async def stop_receiving(self) -> None:
        """Close the socket or the HTTP endpoint: no new events arrive."""
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._edge is not None:
            await self._edge.stop()
            self._edge = None
        if self._events is not None:
            self._events.close()
            self._events = None

    async def close_session(self) -> None:
        """Close the keep-alive session (last: after-ack work may still be posting)."""
        session, self._client.session = self._client.session, None
        if session is not None:
            await session.close()
