"""Slack adapter on slack-bolt `AsyncApp`: Socket Mode or the HTTP Events API in, threaded
mrkdwn replies, one edited status message, Block Kit prompts and modals out."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.access import AccessPolicy
from bot.attachments import attachment_path, download, files_note
from bot.channel import CATCH_UP_SECONDS, ChannelFeatures, Inbox, Ingress, PromptAnswers
from bot.prompt_ui import Click, closed_text, handle_click, handle_submission, parse_action_id
from bot.slack.blocks import (
    MODAL_ACTION,
    MODAL_BLOCK,
    MODAL_CALLBACK,
    answer_modal,
    closed_blocks,
    prompt_blocks,
)
from bot.slack.mrkdwn import markdown_to_mrkdwn, neutralize_slack_args, render_for_slack
from bot.slack.normalize import (
    DM_THREAD,
    IGNORED_SUBTYPES,
    SlackEvent,
    mentioned_users,
    mentions,
    parse_event,
    plain_text,
    replace_mentions,
    strip_bot_mention,
    to_inbound,
)
from core.ids import ConversationRef
from host.runtime.author_labels import context_line, display_name, left_out_note
from host.runtime.messages import Attachment, InboundMessage, OutboundMessage
from host.runtime.people import shown_name
from host.runtime.ports import ChannelError
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

MAX_REPLY_PAGES = 10
METADATA_EVENT = "raven_message"
# auth.test errors no retry can fix: the token itself is wrong.
_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
# Slack errors that trying again cannot fix (the outbox does not retry these).
_PERMANENT_ERRORS = _TOKEN_ERRORS | {
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
_UNREACHABLE = (aiohttp.ClientError, OSError, TimeoutError, SlackApiError)


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


def _unreachable_reason(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return f"Slack answered {exc.response.get('error') or exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _at(delay: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(time.time() + delay))


# slack_sdk notices repeated on every retry while Slack is unreachable: our WARNING says it.
_SDK_RETRY_NOISE = (
    "A retry handler found",
    "The session (",  # "... seems to be already closed. Reconnecting..."
    "Failed to receive or enqueue a message: Client",
)
_SDK_RECONNECT_FAILED = "Failed to check the current session"


class _SdkLog(logging.Logger):
    """slack_sdk's logger, minus tracebacks and repeats for an unreachable Slack.

    The Socket Mode client logs a full traceback on every failed connect and an error or
    two on every failed reconnect (each ping interval); this makes each attempt one WARNING
    with the next retry time and demotes the per-retry notices to DEBUG. A child of `log`.
    """

    def __init__(self, parent: logging.Logger, retry_in: float) -> None:
        # Not registered with logging's manager: one per adapter, dropped with it.
        super().__init__(f"{parent.name}.sdk")
        self.parent = parent
        self._retry_in = retry_in

    def _retry_line(self, what: str) -> str:
        return f"slack: {what}; retrying at {_at(self._retry_in)} (in {self._retry_in:g}s)"

    def handle(self, record: logging.LogRecord) -> None:
        """Rewrite the records described above, then hand them on like any logger."""
        message = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, _UNREACHABLE):
            record.exc_info, record.exc_text = None, None
            if message.startswith("Failed to connect"):
                record.levelno, record.levelname = logging.WARNING, "WARNING"
                message = self._retry_line(
                    f"Socket Mode cannot connect ({_unreachable_reason(exc)})"
                )
            else:
                message = f"{message} ({_unreachable_reason(exc)})"
            record.msg, record.args = message, ()
        elif message.startswith(_SDK_RECONNECT_FAILED):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            detail = message.partition("reconnect to the server ")[2] or message
            record.msg = self._retry_line(f"Socket Mode cannot reconnect {detail}")
            record.args = ()
        elif record.levelno <= logging.ERROR and message.startswith(_SDK_RETRY_NOISE):
            if not self.isEnabledFor(logging.DEBUG):
                return
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        super().handle(record)


class SlackAdapter:
    """One Slack workspace connection (a `ChannelAdapter` and a `PromptSurface`)."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
    ) -> None:
        self.config = config
        self._transport = config.transport
        self._policy = policy
        self._workspace = workspace
        self._inbox: Inbox | None = None
        self._prompts: PromptAnswers | None = None
        self._sdk_log = _SdkLog(log, config.socket_ping_interval)
        self._client = AsyncWebClient(
            token=config.bot_token,
            base_url=config.api_url,
            retry_handlers=retry_handlers(config.rate_limit_retries),
            logger=self._sdk_log,
        )
        self._names: dict[str, str] = {}
        self._bot_user_id: str | None = None
        self._auth: AuthorizeResult | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self.ready = asyncio.Event()
        self.http_port: int | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None

    @property
    def platform(self) -> str:
        """Conversation keys start with `slack`."""
        return "slack"

    @property
    def client(self) -> AsyncWebClient:
        """The Web API client (tests point it at a loopback fake)."""
        return self._client

    @property
    def features(self) -> ChannelFeatures:
        """Threads, buttons, modals, ephemeral notes and in-place edits."""
        return ChannelFeatures.full(threads=self.config.thread_replies)

    # -- lifecycle ---------------------------------------------------------------------

    def build_app(self) -> AsyncApp:
        """The bolt app with every listener registered (built inside the running loop)."""

        async def authorize() -> AuthorizeResult:
            return await self._authorize()

        app = AsyncApp(
            # Tokenless: each request's client gets the token from `authorize` (bolt warns
            # about a token it would ignore otherwise).
            client=AsyncWebClient(
                base_url=self.config.api_url,
                retry_handlers=retry_handlers(self.config.rate_limit_retries),
                logger=self._sdk_log,
            ),
            signing_secret=self.config.signing_secret or "",
            # Ack after the listener, which only persists: "persist before you announce".
            process_before_response=True,
            # The startup auth.test, reused: no request waits on a Web API call before its ack.
            authorize=authorize,
        )
        app.event("app_mention")(self._on_mention)
        app.event("message")(self._on_message)
        app.action(re.compile(r"^prompt:"))(self._on_action)
        app.view(MODAL_CALLBACK)(self._on_view)
        return app

    async def serve(self, ingress: Ingress) -> None:
        """Connect the configured transport and serve `ingress` until closed."""
        self._inbox, self._prompts = ingress.inbox, ingress.prompts
        app = self.build_app()
        # One keep-alive session for every Web API call: without it the SDK opens (and in
        # production TLS-handshakes) a connection per call. Closed in teardown; a call made
        # after that (an outbox drain at shutdown) gets the SDK's session-per-call fallback.
        self._client.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._client.timeout)
        )
        try:
            if not await self._authenticate():
                return  # closed while Slack was unreachable
            if self._transport == "socket":
                assert self.config.app_token is not None
                self._socket = AsyncSocketModeHandler(
                    app,
                    app_token=self.config.app_token,
                    logger=self._sdk_log,
                    ping_interval=self.config.socket_ping_interval,
                )
                await self._socket.connect_async()  # type: ignore[no-untyped-call]
            else:
                await self._start_http(app)
            self.ready.set()
            log.info("slack: serving over %s", self._transport)
            self._spawn(self._catch_up(), "catch-up")
            await self._closed.wait()
        finally:
            await self._teardown()

    async def _authenticate(self) -> bool:
        """auth.test until it answers (False: closed first); a bad token raises at once.

        While Slack is unreachable this logs one line per attempt with the next retry time.
        """
        delay = self.config.connect_retry_initial
        while not self._closed.is_set():
            try:
                resp = await self._client.auth_test()
            except SlackApiError as exc:
                error = str(exc.response.get("error") or "")
                if error in _TOKEN_ERRORS:
                    raise RuntimeError(
                        f"Slack rejected SLACK_BOT_TOKEN ({error}): check the token"
                    ) from None
                reason = _unreachable_reason(exc)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                reason = _unreachable_reason(exc)
            else:
                self._auth = AuthorizeResult.from_auth_test_response(
                    auth_test_response=resp, bot_token=self.config.bot_token
                )
                self._bot_user_id = resp.get("user_id") or self._bot_user_id
                log.info("slack: authenticated as %s in %s", resp.get("user"), resp.get("team"))
                return True
            log.warning(
                "slack: cannot reach the Slack API at %s (%s); retrying at %s (in %gs)",
                self.config.api_url,
                reason,
                _at(delay),
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), delay)
            delay = min(delay * 2, self.config.connect_retry_max)
        return False

    async def _authorize(self) -> AuthorizeResult:
        """bolt's authorization: the identity found by `_authenticate` before serving."""
        if self._auth is None:  # not reached in `serve`, which authenticates first
            resp = await self._client.auth_test()
            self._auth = AuthorizeResult.from_auth_test_response(
                auth_test_response=resp, bot_token=self.config.bot_token
            )
        return self._auth

    async def _start_http(self, app: AsyncApp) -> None:
        async def events(request: web.Request) -> web.Response:
            bolt_response = await app.async_dispatch(await to_bolt_request(request))
            return await to_aiohttp_response(bolt_response)

        async def health(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        web_app = web.Application()
        web_app.router.add_post(self.config.http_path, events)
        web_app.router.add_get("/healthz", health)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http_host, self.config.http_port)
        await site.start()
        address = self._runner.addresses[0]
        self.http_port = int(address[1])

    async def close(self) -> None:
        """Stop serving (idempotent)."""
        self._closed.set()

    async def _teardown(self) -> None:
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        tasks = list(self._tasks)
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=5)
            for task in still:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        session, self._client.session = self._client.session, None
        if session is not None:
            await session.close()

    async def idle(self) -> None:
        """Wait until the work started by acknowledged events and clicks has finished."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        """Run work after the ack in a task this adapter owns (awaited on close)."""

        async def guarded() -> None:
            try:
                await coro
            except _UNREACHABLE as exc:
                log.warning("slack: %s failed: %s", name, _unreachable_reason(exc))
            except ChannelError as exc:
                log.warning("slack: %s failed: %s", name, exc)
            except Exception:
                log.exception("slack: background task %s failed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- ingress -----------------------------------------------------------------------

    async def _on_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        self._bot_user_id = context.get("bot_user_id") or self._bot_user_id
        await self._ingest(body, event, mentioned=True)

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        self._bot_user_id = context.get("bot_user_id") or self._bot_user_id
        ev = parse_event(body, event)
        if ev.is_dm:
            await self._ingest(body, event, mentioned=True)
            return
        if mentions(ev.text, self._bot_user_id):
            return  # the app_mention event for this message starts the turn
        if ev.thread_ts and self.config.thread_replies:
            await self._ingest(body, event, mentioned=False)

    async def _ingest(
        self, body: dict[str, Any], event: dict[str, Any], *, mentioned: bool
    ) -> None:
        ev = parse_event(body, event)
        if ev.subtype in IGNORED_SUBTYPES or not ev.user or not ev.ts:
            return
        if (ev.bot_id or ev.subtype == "bot_message") and not self.config.allow_bots:
            return
        assert self._inbox is not None
        conv = ConversationRef("slack", ev.team, ev.channel, ev.thread_root)
        if not mentioned and not await self._inbox.knows(conv):
            return  # a thread the bot is not part of
        refusal = self._policy.refusal(ev.user, ev.channel, is_dm=ev.is_dm)
        if refusal is not None:
            self._spawn(self._refuse(ev, refusal), f"refuse:{ev.ts}")
            return
        text = strip_bot_mention(ev.text, self._bot_user_id)
        if not text and not ev.files:
            text = "help"
        # No users.info here: the ack must not wait on Slack. `enrich` resolves the name.
        msg = to_inbound(ev, text=text, author_name=self._names.get(ev.user, ev.user))
        if mentioned and ev.thread_ts:
            msg = msg.model_copy(update={"reread_thread": True})
        await self._inbox.receive(msg)

    async def _catch_up(self) -> None:
        """Read back what was said while the bot was down (Slack retries a delivery for
        minutes, not for an outage): replies in its recent threads, then new mentions and DM
        messages in the channels of those conversations. Duplicates are dropped by the
        message-level dedup key, whichever way a message arrives."""
        assert self._inbox is not None
        recent = await self._inbox.recent(self.platform, time.time() - CATCH_UP_SECONDS)
        found = 0
        newest: dict[tuple[str, str], str] = {}
        for conv, last_ts in recent:
            if conv.thread != DM_THREAD:  # a DM's history is a channel read
                found += await self._read_back_thread(conv, last_ts)
            key = (conv.workspace, conv.channel)
            if float(last_ts or 0) > float(newest.get(key, 0)):
                newest[key] = last_ts
        for (workspace, channel), oldest in newest.items():
            found += await self._read_back_channel(workspace, channel, oldest)
        if found:
            log.info("slack: %d message(s) from the downtime read back", found)

    async def _read_back_thread(self, conv: ConversationRef, last_ts: str) -> int:
        """The thread's replies after `last_ts`, taken in as events; how many."""
        try:
            replies = await self._thread_messages(conv.channel, conv.thread)
        except SlackApiError as exc:
            log.warning("slack: reading back thread %s failed: %s", conv.thread, exc)
            return 0
        found = 0
        for item in replies:
            if float(item.get("ts", 0)) <= float(last_ts or 0):
                continue
            event = {**item, "channel": conv.channel, "thread_ts": conv.thread}
            body = {"team_id": conv.workspace, "event_id": f"read-back:{item.get('ts')}"}
            mentioned = mentions(str(item.get("text", "")), self._bot_user_id)
            await self._ingest(body, event, mentioned=mentioned)
            found += 1
        return found

    async def _read_back_channel(self, workspace: str, channel: str, oldest: str) -> int:
        """The channel's top-level messages after `oldest` that are meant for the bot (a
        mention, each starting a thread; in a DM, every message), in order; how many."""
        try:
            messages = await self._channel_messages(channel, oldest)
        except SlackApiError as exc:
            log.warning("slack: reading back channel %s failed: %s", channel, exc)
            return 0
        found = 0
        for item in reversed(messages):  # Slack pages newest first
            dm = channel.startswith("D")
            if not dm and not mentions(str(item.get("text", "")), self._bot_user_id):
                continue
            body = {"team_id": workspace, "event_id": f"read-back:{item.get('ts')}"}
            await self._ingest(body, {**item, "channel": channel}, mentioned=True)
            found += 1
        return found

    async def _channel_messages(self, channel: str, oldest: str) -> list[dict[str, Any]]:
        """A channel's top-level messages after `oldest`, newest first (walks the cursor)."""
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_REPLY_PAGES):
            resp = await self._client.conversations_history(
                channel=channel, oldest=oldest, limit=200, cursor=cursor
            )
            messages.extend(resp.get("messages") or [])
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not resp.get("has_more") or not cursor:
                break
        return messages

    async def _refuse(self, ev: SlackEvent, reason: str) -> None:
        await self._call(
            self._client.chat_postEphemeral,
            channel=ev.channel,
            user=ev.user,
            text=reason,
            thread_ts=ev.thread_ts,
        )

    async def display_name(self, user_id: str) -> str:
        """A person's display name from `users.info` (cached; the id when the call fails).
        Shown as plain text, never as a `<@U…>` mention: a mention in a bot message pings."""
        return await self._name(user_id)

    async def _shown(self, user_id: str | None) -> str:
        """`user_id` as people in a prompt message are shown it (cleaned display name)."""
        if not user_id:
            return "nobody"
        return shown_name(await self._name(user_id)) or user_id

    async def _named_mentions(self, text: str) -> str:
        """`<@U…>` in outgoing text (model output may hold one) → `@display name`: shown by
        name, and never a mention, which would ping (the egress neutraliser is the backstop)."""
        ids = set(mentioned_users(text))
        names = {uid: await self._shown(uid) for uid in ids}
        return replace_mentions(text, names)

    async def _name(self, user_id: str) -> str:
        if user_id in self._names:
            return self._names[user_id]
        try:
            async with asyncio.timeout(2):
                resp = await self._client.users_info(user=user_id)
            user = resp.get("user") or {}
            profile = user.get("profile") or {}
            name = str(
                profile.get("display_name") or user.get("real_name") or user.get("name") or user_id
            )
        except (SlackApiError, TimeoutError, aiohttp.ClientError) as exc:
            log.warning("slack: users.info %s failed: %s", user_id, exc)
            return user_id
        self._names[user_id] = name
        return name

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Before a turn: names for mentions, the thread re-read, shared files downloaded."""
        author_name = msg.author_name
        if author_name == msg.author_id:
            author_name = await self._name(msg.author_id)
        names = {uid: display_name(await self._name(uid)) for uid in set(mentioned_users(msg.text))}
        text = plain_text(msg.text, names)
        context = ""
        if msg.reread_thread:
            context = await self._thread_context(msg)
        attachments = [await self._download(msg, a) for a in msg.attachments]
        if attachments:
            text = f"{text}\n\n{files_note(attachments)}"
        return msg.model_copy(
            update={
                "text": text,
                "context": context,
                "attachments": tuple(attachments),
                "author_name": author_name,
            }
        )

    async def _thread_messages(
        self, channel: str, thread: str, *, metadata: bool = False
    ) -> list[dict[str, Any]]:
        """A thread's messages, oldest first (Slack pages oldest first: walk the cursor)."""
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_REPLY_PAGES):
            resp = await self._client.conversations_replies(
                channel=channel,
                ts=thread,
                limit=200,
                cursor=cursor,
                include_all_metadata=metadata,
            )
            messages.extend(resp.get("messages") or [])
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not resp.get("has_more") or not cursor:
                break
        return messages

    async def _thread_context(self, msg: InboundMessage) -> str:
        """Recent messages by other people in the thread, oldest first, each under its
        author's label; messages by people the access policy refuses are left out."""
        limit = self.config.thread_context_messages
        if limit <= 0:
            return ""
        try:
            thread = await self._thread_messages(msg.channel, msg.thread)
        except SlackApiError as exc:
            log.warning("slack: conversations.replies failed: %s", exc)
            return ""
        lines = []
        refused = 0
        for item in thread[-(limit + 1) :]:
            if item.get("ts") == msg.message_id or item.get("bot_id"):
                continue
            user = str(item.get("user", "?"))
            if user == self._bot_user_id:
                continue
            if self._policy.refusal(user, msg.channel, is_dm=msg.is_dm) is not None:
                refused += 1  # someone refused here must not speak to the bot through others
                continue
            body = str(item.get("text", ""))
            if mentions(body, self._bot_user_id):
                continue  # messages that addressed the bot were turns: already in history
            names = {uid: display_name(await self._name(uid)) for uid in set(mentioned_users(body))}
            lines.append(context_line(await self._name(user), user, plain_text(body, names)))
        lines = lines[-limit:]
        if refused:
            lines.append(left_out_note(refused))
        return "\n".join(lines)

    async def _download(self, msg: InboundMessage, attachment: Attachment) -> Attachment:
        target = attachment_path(self._workspace(msg.conversation), msg.message_id, attachment.name)
        return await download(
            attachment,
            target,
            cap=self.config.attachment_max_bytes,
            headers={"Authorization": f"Bearer {self.config.bot_token}"},
            platform="slack",
        )

    # -- interactivity -----------------------------------------------------------------

    async def _on_action(
        self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        # Validate and ack only: answering, closing and notes post to Slack, and the ack
        # must not wait on that (a 429 with Retry-After would push it past Slack's 3 s).
        await ack()
        parsed = parse_action_id(str(action.get("action_id", "")))
        if parsed is None or self._prompts is None:
            return
        self._spawn(self._clicked(body, *parsed), f"click:{parsed[0]}")

    async def _clicked(self, body: dict[str, Any], prompt_id: str, nonce: str, choice: str) -> None:
        assert self._prompts is not None
        user = str((body.get("user") or {}).get("id", ""))
        clicked = _clicked_message(body)
        click = Click(prompt_id, nonce, choice, user, clicked[1] if clicked else None)
        await handle_click(self._prompts, click, _SlackClick(self, body, user, clicked))

    async def _on_view(
        self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            value = str(view["state"]["values"][MODAL_BLOCK][MODAL_ACTION]["value"] or "")
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("slack: malformed view_submission")
            await ack()
            return
        if not value.strip():
            # Validation belongs in the ack: the modal stays open and shows why.
            await ack(response_action="errors", errors={MODAL_BLOCK: "Please type an answer."})
            return
        await ack()
        if self._prompts is None:
            return
        user = str((body.get("user") or {}).get("id", ""))
        prompt_id, nonce = str(meta.get("prompt_id")), str(meta.get("nonce"))
        self._spawn(self._submitted(prompt_id, nonce, user, value), f"modal:{prompt_id}")

    async def _submitted(self, prompt_id: str, nonce: str, user: str, value: str) -> None:
        assert self._prompts is not None
        prompts = self._prompts

        async def refuse(text: str) -> None:
            prompt = await prompts.get(prompt_id)
            if prompt is not None:
                await self.notify_private(prompt.conversation, user, text)

        await handle_submission(prompts, prompt_id, nonce, user, value, refuse)

    async def _ephemeral(self, body: dict[str, Any], user: str, text: str) -> None:
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        message = body.get("message") or {}
        if not channel:
            return
        await self._call(
            self._client.chat_postEphemeral,
            channel=channel,
            user=user,
            text=text,
            thread_ts=message.get("thread_ts"),
        )

    # -- egress ------------------------------------------------------------------------

    async def _call(
        self, method: Callable[..., Awaitable[AsyncSlackResponse]], **args: Any
    ) -> AsyncSlackResponse:
        """Every Web API call that sends text goes through here: pings are neutralised in
        `text`, blocks and views alike, whatever produced them."""
        try:
            return await method(**neutralize_slack_args(args))
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if error in _PERMANENT_ERRORS:
                raise ChannelError(f"Slack refused the call: {error}", retryable=False) from exc
            raise

    @staticmethod
    def _thread_ts(conv: ConversationRef) -> str | None:
        return None if conv.thread == DM_THREAD else conv.thread

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤3,500-char mrkdwn parts; a redelivery skips parts Slack
        already has (found by the idempotency key in message metadata)."""
        chunks = render_for_slack(await self._named_mentions(message.text)) or ["(empty)"]
        if message.ephemeral_to:
            await self._call(
                self._client.chat_postEphemeral,
                channel=conv.channel,
                user=message.ephemeral_to,
                text=chunks[0],
                thread_ts=self._thread_ts(conv),
            )
            return ""
        posted = (
            await self._posted_parts(conv, message.idempotency_key) if message.redelivery else {}
        )
        first: str | None = posted.get(0)
        for index, chunk in enumerate(chunks):
            if index in posted:
                continue
            resp = await self._call(
                self._client.chat_postMessage,
                channel=conv.channel,
                thread_ts=self._thread_ts(conv),
                text=chunk,
                unfurl_links=False,
                unfurl_media=False,
                metadata={
                    "event_type": METADATA_EVENT,
                    "event_payload": {"key": message.idempotency_key[:200], "part": index},
                },
            )
            if first is None:
                first = str(resp["ts"])
        return first or ""

    async def _posted_parts(self, conv: ConversationRef, key: str) -> dict[int, str]:
        thread = self._thread_ts(conv)
        if thread is None:
            return {}
        try:
            thread_messages = await self._thread_messages(conv.channel, thread, metadata=True)
        except SlackApiError as exc:
            log.warning("slack: could not check for an earlier delivery: %s", exc)
            return {}
        parts: dict[int, str] = {}
        for item in thread_messages:
            meta = item.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == METADATA_EVENT and payload.get("key") == key[:200]:
                parts[int(payload.get("part", 0))] = str(item.get("ts"))
        return parts

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place (`chat.update`)."""
        chunks = render_for_slack(await self._named_mentions(message.text)) or ["(empty)"]
        await self._call(
            self._client.chat_update, channel=conv.channel, ts=message_id, text=chunks[0]
        )

    async def show_prompt(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        question = markdown_to_mrkdwn(prompt.question)
        resp = await self._call(
            self._client.chat_postMessage,
            channel=prompt.conversation.channel,
            thread_ts=self._thread_ts(prompt.conversation),
            text=prompt.question[:300],
            blocks=prompt_blocks(prompt, question, await self._shown(prompt.requester)),
        )
        return str(resp["ts"])

    async def close_prompt(self, prompt: Prompt) -> None:
        """Remove the buttons and show the outcome and who decided."""
        if prompt.message_id:
            await self._close_message(prompt.conversation.channel, prompt.message_id, prompt)

    async def _close_message(self, channel: str, ts: str, prompt: Prompt) -> None:
        closed = replace(prompt, message_id=ts)
        decider = await self._shown(prompt.answered_by)
        await self._call(
            self._client.chat_update,
            channel=channel,
            ts=ts,
            text=closed_text(closed, decider),
            blocks=closed_blocks(closed, markdown_to_mrkdwn(prompt.question), decider),
        )

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """An ephemeral message only `user_id` sees."""
        await self._call(
            self._client.chat_postEphemeral,
            channel=conv.channel,
            user=user_id,
            text=text,
            thread_ts=self._thread_ts(conv),
        )


@dataclass(frozen=True)
class _SlackClick:
    """Answers one block_actions click: ephemeral notes, the modal, closing the message."""

    adapter: SlackAdapter
    body: dict[str, Any]
    user: str
    clicked: tuple[str, str] | None

    async def refuse(self, text: str) -> None:
        """An ephemeral note to the clicker."""
        await self.adapter._ephemeral(self.body, self.user, text)

    async def open_answer_form(self, prompt: Prompt) -> None:
        """The free-text modal, opened with the click's trigger id."""
        await self.adapter._call(
            self.adapter.client.views_open,
            trigger_id=self.body.get("trigger_id"),
            view=answer_modal(prompt, markdown_to_mrkdwn(prompt.question)),
        )

    async def close_clicked(self, prompt: Prompt) -> None:
        """Close the clicked message."""
        if self.clicked is not None:
            await self.adapter._close_message(self.clicked[0], self.clicked[1], prompt)


def _clicked_message(body: dict[str, Any]) -> tuple[str, str] | None:
    """(channel, ts) of the message whose button was clicked, from the block_actions body."""
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    ts = (body.get("message") or {}).get("ts") or container.get("message_ts")
    return (str(channel), str(ts)) if channel and ts else None
