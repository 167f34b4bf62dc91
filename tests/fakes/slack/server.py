"""A loopback fake of Slack (Web API, file downloads, response_url, Socket Mode) for tests.

It is built to be driven by the *real* slack_sdk / slack-bolt clients; see
`/work/shared/notes/testing-slack-offline.md` for the observed client behaviour it mirrors:

* every verb on `/api/{method}`; arguments are the merged query string, form and JSON body;
  the token comes from `Authorization: Bearer …` (or a `token` argument as a fallback);
* Slack's reply shapes, including `X-OAuth-Scopes` on responses to bot tokens;
* faults: a real HTTP 429 with `Retry-After` (the only thing slack_sdk retries) or a 200
  `ok:false` reply, queued per method;
* the external upload flow of `files_upload_v2` (uploads.py), `assistant.threads.setStatus`
  (status.py) and `missing_scope` for the methods that need `files:write` (scopes.py);
* Socket Mode on `/link/?ticket=…`: `hello`, envelopes, acks, `disconnect` frames, autopong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import TracebackType
from typing import Any, Literal, TypeVar

from aiohttp import WSMsgType, web

from tests.fakes.slack import payloads
from tests.fakes.slack.scopes import missing_scope
from tests.fakes.slack.status import StatusUpdate, ThreadStatuses
from tests.fakes.slack.uploads import MAX_FILE_BYTES, SharedFile, SlackUploads
from tests.helpers import eventually

__all__ = [
    "DEFAULT_SCOPES",
    "Call",
    "Envelope",
    "FakeSlack",
    "FaultKind",
    "Hold",
    "MethodResponder",
    "ResponseUrlPost",
    "SlashCommand",
]

T = TypeVar("T")

FaultKind = Literal["http429", "ok_false"]
MethodResponder = Callable[[dict[str, Any]], dict[str, Any]]

DEFAULT_SCOPES: tuple[str, ...] = (
    "app_mentions:read",
    "channels:history",
    "chat:write",
    "commands",
    "files:read",
    "files:write",
    "groups:history",
    "im:history",
    "reactions:write",
    "users:read",
)

_POLL_INTERVAL = 0.005
# Arguments that arrive as JSON strings when a client sends a form instead of a JSON body.
_JSON_ARGS = frozenset({"blocks", "attachments", "view", "metadata"})
_READS = frozenset({"conversations.history", "conversations.replies"})
_FIRST_TS_MICROS = 1_700_000_000_000_100
_TS_STEP_MICROS = 100


@dataclass(frozen=True)
class Call:
    """One request to `/api/{method}`, as the fake saw and answered it."""

    method: str
    verb: str
    token: str | None
    args: dict[str, Any]
    headers: dict[str, str]
    at: float  # time.monotonic() on arrival
    status: int
    response: dict[str, Any]

    @property
    def ok(self) -> bool:
        """Whether the fake answered `ok: true`."""
        return bool(self.response.get("ok"))

    @property
    def error(self) -> str | None:
        """The `error` of an `ok: false` answer, else None."""
        error = self.response.get("error")
        return str(error) if error is not None else None


@dataclass(frozen=True)
class ResponseUrlPost:
    """One POST to a fake `response_url`."""

    id: str
    json: Any
    headers: dict[str, str]
    at: float


@dataclass(frozen=True)
class Envelope:
    """One Socket Mode envelope sent to the client."""

    envelope_id: str
    type: str
    payload: dict[str, Any]
    frame: dict[str, Any]
    at: float


@dataclass(frozen=True)
class SlashCommand:
    """One slash command delivered over Socket Mode, with the client's ack."""

    envelope_id: str
    payload: dict[str, str]
    ack: dict[str, Any]
    response_url_id: str

    @property
    def ack_payload(self) -> dict[str, Any] | None:
        """What the app acked with (`ack(text)` / `ack(blocks=…)`), None for a bare ack."""
        payload = self.ack.get("payload")
        return payload if isinstance(payload, dict) else None


@dataclass
class Hold:
    """Holds back the HTTP responses to matching calls until `release()`.

    A held call is recorded and served at once (a posted message exists, with its ts), but
    the client does not see the reply yet: this reproduces races with the client's view,
    e.g. a click arriving before `chat.postMessage` returned, or an ack racing a post.
    """

    method: str
    when: Callable[[dict[str, Any]], bool] | None = None
    calls: list[Call] = field(default_factory=list)
    _gate: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def released(self) -> bool:
        """Whether held responses have been let go."""
        return self._gate.is_set()

    def matches(self, method: str, args: dict[str, Any]) -> bool:
        """Whether a call to `method` with `args` is held (never after release)."""
        return (
            not self.released and method == self.method and (self.when is None or self.when(args))
        )

    def release(self) -> None:
        """Send every held response and stop holding."""
        self._gate.set()

    async def wait(self) -> None:
        """Block until released (used by the fake's request handler)."""
        await self._gate.wait()

    async def wait_held(self, count: int = 1, within: float = 5.0) -> list[Call]:
        """Wait until `count` calls are being held; returns them."""
        await eventually(
            lambda: len(self.calls) >= count,
            within,
            what=lambda: f"{count} held call(s) to {self.method}, got {len(self.calls)}",
            every=_POLL_INTERVAL,
        )
        return list(self.calls)


@dataclass(frozen=True)
class _Fault:
    kind: FaultKind
    retry_after: int
    error: str
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _File:
    file_id: str
    name: str
    data: bytes
    mimetype: str


@dataclass
class _Reply:
    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def _ts_to_micros(ts: str) -> int:
    return int(Decimal(ts) * 1_000_000)


def _micros_to_ts(micros: int) -> str:
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _ts_key(message: dict[str, Any]) -> Decimal:
    return Decimal(str(message["ts"]))


def _maybe_json(name: str, value: Any) -> Any:
    if name in _JSON_ARGS and isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _error(error: str, **extra: Any) -> _Reply:
    return _Reply({"ok": False, "error": error, **extra})


class FakeSlack:
    """A fake Slack on 127.0.0.1 (port 0): Web API, files, response_url and Socket Mode.

    Use `async with FakeSlack() as fake:` (or `await fake.start()` / `await fake.stop()`), then
    point clients at `fake.api_url`. Seed state with `add_user`, `add_thread_message` and
    `add_file`; inspect `calls`, `response_url_posts`, `acks`; inject faults with `fail_next`.

    `strict=True` makes `chat.update` on an unknown message answer `message_not_found` and
    `conversations.replies` on an unknown thread answer `thread_not_found`, like Slack; the
    lenient default succeeds (an update creates nothing, an unknown thread is empty).
    """

    def __init__(
        self,
        *,
        team_id: str = "T1",
        team: str = "Fake Team",
        bot_user_id: str = "UBOT",
        bot_name: str = "raven",
        bot_id: str = "BBOT",
        app_id: str = "A1",
        scopes: Iterable[str] = DEFAULT_SCOPES,
        strict: bool = False,
        max_upload_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self.team_id = team_id
        self.team = team
        self.bot_user_id = bot_user_id
        self.bot_name = bot_name
        self.bot_id = bot_id
        self.app_id = app_id
        self.scopes: list[str] = list(scopes)
        self.strict = strict

        self.calls: list[Call] = []
        self.response_url_posts: list[ResponseUrlPost] = []
        self.views: list[dict[str, Any]] = []
        self.file_downloads: list[tuple[str, int]] = []  # (file_id, status)
        self.reactions: list[tuple[str, str, str]] = []  # (channel, timestamp, name)

        self.envelopes: list[Envelope] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.socket_messages: list[dict[str, Any]] = []
        self.connection_count = 0
        self.connected = asyncio.Event()
        # Client (host, port) pairs seen by the Web API: one per TCP connection the bot opened.
        self.api_peers: set[tuple[str, int]] = set()

        self.host = "127.0.0.1"
        self.port = 0
        self.base_url = ""
        self.api_url = ""

        self._users: dict[str, dict[str, Any]] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._files: dict[str, _File] = {}
        self._faults: dict[str, deque[_Fault]] = {}
        self._custom: dict[str, MethodResponder] = {}
        self._holds: list[Hold] = []
        self._unreadable: set[str] = set()  # channels whose reads drop the connection
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._last_ts = _FIRST_TS_MICROS - _TS_STEP_MICROS
        self._view_seq = 0
        self._command_seq = 0
        self._clock_offset = 0.0
        self.uploads = SlackUploads("", bot_user_id, team_id, max_upload_bytes)
        self.statuses = ThreadStatuses()
        self._runner: web.AppRunner | None = None
        self._methods: dict[str, Callable[[dict[str, Any], str], _Reply]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "reactions.add": self._reactions_add,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "users.info": self._users_info,
            "views.open": self._views_open,
            "apps.connections.open": self._apps_connections_open,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "files.info": self._files_info,
            "assistant.threads.setStatus": self._assistant_set_status,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> FakeSlack:
        """Bind 127.0.0.1 on a free port and start serving; returns self."""
        # Bodies as large as an upload may be (aiohttp's default cap is 1 MiB; a multipart
        # upload carries a little more than the file).
        app = web.Application(client_max_size=self.uploads.max_file_bytes + 2**16)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files/{file_id}/{name}", self._file)
        app.router.add_post("/response_url/{id}", self._response_url)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/link/", self._link)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.base_url = f"http://{self.host}:{self.port}"
        self.api_url = f"{self.base_url}/api/"
        self.uploads.base_url = self.base_url
        return self

    async def stop(self) -> None:
        """Release held responses, close Socket Mode connections and stop serving."""
        for hold in self._holds:
            hold.release()
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001, message=b"server stopping")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- seeding -----------------------------------------------------------------------------

    def next_ts(self) -> str:
        """A new message timestamp, later than every one the fake has issued or been given."""
        self._last_ts += _TS_STEP_MICROS
        return _micros_to_ts(self._last_ts)

    def _see_ts(self, ts: str) -> None:
        with contextlib.suppress(ArithmeticError, ValueError):
            self._last_ts = max(self._last_ts, _ts_to_micros(ts))

    def add_user(
        self,
        id: str,
        name: str,
        real_name: str = "",
        display_name: str = "",
        is_bot: bool = False,
        tz: str = "Europe/London",
    ) -> dict[str, Any]:
        """Seed a user for `users.info`; returns the user object the API will serve."""
        user: dict[str, Any] = {
            "id": id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "tz": tz,
            "tz_offset": 0,
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "updated": 1_700_000_000,
            "profile": {
                "real_name": real_name,
                "real_name_normalized": real_name,
                "display_name": display_name,
                "display_name_normalized": display_name,
                "team": self.team_id,
            },
        }
        self._users[id] = user
        return user

    def add_thread_message(
        self,
        channel: str,
        thread_ts: str,
        user: str,
        text: str,
        ts: str | None = None,
        bot_id: str | None = None,
        files: list[dict[str, Any]] | None = None,
    ) -> str:
        """Seed a message of a thread for `conversations.replies`; returns its ts.

        With `ts == thread_ts` the message is the thread's parent; with `ts=None` a fresh ts
        (later than all others) is used, making it the newest reply.
        """
        if ts is None:
            ts = self.next_ts()
        self._see_ts(thread_ts)
        self._see_ts(ts)
        message: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "thread_ts": thread_ts,
            "team": self.team_id,
        }
        if bot_id is not None:
            message["bot_id"] = bot_id
        if files:
            message["files"] = files
            message["upload"] = False
        self._messages.setdefault(channel, []).append(message)
        return ts

    def add_channel_message(self, channel: str, user: str, text: str) -> str:
        """Seed a new top-level message of a channel (or DM) for `conversations.history`,
        later than all others; returns its ts."""
        ts = self.next_ts()
        self._see_ts(ts)
        message = {"type": "message", "user": user, "text": text, "ts": ts, "team": self.team_id}
        self._messages.setdefault(channel, []).append(message)
        return ts

    def add_file(
        self, file_id: str, name: str, data: bytes, mimetype: str = "application/octet-stream"
    ) -> str:
        """Serve `data` at `GET /files/{file_id}/{name}`; returns its `url_private_download`."""
        self._files[file_id] = _File(file_id, name, data, mimetype)
        return self.file_url(file_id)

    def file_url(self, file_id: str) -> str:
        """The loopback download URL of a file added with `add_file`."""
        file = self._files[file_id]
        return f"{self.base_url}/files/{file.file_id}/{file.name}"

    def file_object(self, file_id: str) -> dict[str, Any]:
        """A Slack file object for an added file, to put in an event's `files` list."""
        file = self._files[file_id]
        url = self.file_url(file_id)
        return {
            "id": file.file_id,
            "created": 1_700_000_000,
            "timestamp": 1_700_000_000,
            "name": file.name,
            "title": file.name,
            "mimetype": file.mimetype,
            "filetype": file.name.rsplit(".", 1)[-1] if "." in file.name else "binary",
            "pretty_type": file.mimetype,
            "user": "U1",
            "size": len(file.data),
            "mode": "hosted",
            "is_external": False,
            "url_private": url,
            "url_private_download": url,
        }

    def add_method(self, method: str, responder: MethodResponder) -> None:
        """Serve (or override) a Web API method: `responder(args)` returns the JSON body."""
        self._custom[method] = responder

    def response_url(self, id: str) -> str:
        """The absolute loopback `response_url` for interaction payloads."""
        return f"{self.base_url}/response_url/{id}"

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """The stored messages of a thread (seeded and posted), oldest first."""
        return sorted(
            (
                m
                for m in self._messages.get(channel, [])
                if m["ts"] == thread_ts or m.get("thread_ts") == thread_ts
            ),
            key=_ts_key,
        )

    # -- faults ------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        kind: FaultKind,
        retry_after: int = 1,
        error: str = "internal_error",
        times: int = 1,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Queue `times` faults for the next calls to `method`; faults stack in order.

        `http429`: status 429, `Retry-After: retry_after`, body `{ok:false, error:ratelimited}`.
        `ok_false`: status 200, body `{ok:false, error:error, **extra}` (e.g. `extra=
        {"needed": "files:write"}` next to `error="missing_scope"`).
        """
        if kind not in ("http429", "ok_false"):
            raise ValueError(f"unknown fault kind {kind!r}")
        queue = self._faults.setdefault(method, deque())
        for _ in range(times):
            queue.append(_Fault(kind, retry_after, error, dict(extra or {})))

    def drop_reads(self, channel: str) -> None:
        """Drop the connection, unanswered, on every `conversations.history` and
        `conversations.replies` call for `channel` (the client sees a network error, not an
        `ok: false`); recorded with the error `connection_dropped`."""
        self._unreadable.add(channel)

    def hold(self, method: str, when: Callable[[dict[str, Any]], bool] | None = None) -> Hold:
        """Hold back responses to calls of `method` (those whose args satisfy `when`) until
        the returned `Hold` is released; see `Hold`."""
        hold = Hold(method, when)
        self._holds.append(hold)
        return hold

    # -- inspection --------------------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        """All recorded calls to `method`, failed ones included, in arrival order."""
        return [c for c in self.calls if c.method == method]

    def posted_messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Arguments of successful `chat.postMessage` calls (optionally to one channel)."""
        return [
            c.args
            for c in self.calls_to("chat.postMessage")
            if c.ok and (channel is None or c.args.get("channel") == channel)
        ]

    def posted_texts(self, channel: str | None = None) -> list[str]:
        """The `text` of each successful `chat.postMessage` (optionally to one channel)."""
        return [str(a.get("text") or "") for a in self.posted_messages(channel)]

    def _describe_calls(self) -> str:
        if not self.calls:
            return "no calls recorded"
        listed = ", ".join(
            f"{c.method}" + ("" if c.ok else f"({c.status} {c.error})") for c in self.calls
        )
        return f"recorded calls: {listed}"

    async def _poll(
        self, probe: Callable[[], T | None], within: float, why: Callable[[], str]
    ) -> T:
        found: list[T] = []

        def probed() -> bool:
            value = probe()
            found[:] = [] if value is None else [value]
            return bool(found)

        await eventually(probed, within, what=why, every=_POLL_INTERVAL)
        return found[0]

    async def wait_for_call(self, method: str, count: int = 1, within: float = 5.0) -> list[Call]:
        """Wait until `method` was called `count` times (any outcome); returns those calls."""

        def probe() -> list[Call] | None:
            found = self.calls_to(method)
            return found if len(found) >= count else None

        def why() -> str:
            got = len(self.calls_to(method))
            return (
                f"expected {count} call(s) to {method} within {within}s, got {got}; "
                f"{self._describe_calls()}"
            )

        return await self._poll(probe, within, why)

    async def wait_for_response_url_post(
        self, id: str | None = None, count: int = 1, within: float = 5.0
    ) -> list[ResponseUrlPost]:
        """Wait until `count` POSTs reached a response_url (or the one with this id)."""

        def matching() -> list[ResponseUrlPost]:
            return [p for p in self.response_url_posts if id is None or p.id == id]

        def probe() -> list[ResponseUrlPost] | None:
            found = matching()
            return found if len(found) >= count else None

        def why() -> str:
            ids = [p.id for p in self.response_url_posts]
            return (
                f"expected {count} response_url post(s) (id={id!r}) within {within}s, got "
                f"{len(matching())}; posts to: {ids}; {self._describe_calls()}"
            )

        return await self._poll(probe, within, why)

    # -- Web API -----------------------------------------------------------------------------

    async def _read_args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        ctype = request.content_type
        if ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, str):
                    args[key] = value
                elif isinstance(value, web.FileField):
                    args[key] = value.filename
                else:
                    args[key] = bytes(value).decode(errors="replace")
        elif request.can_read_body:
            raw = await request.read()
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                if isinstance(body, dict):
                    args.update(body)
        return {k: _maybe_json(k, v) for k, v in args.items()}

    @staticmethod
    def _bearer(request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("bearer "):
            token = header[7:].strip()
            return token or None
        return None

    def _queued_fault(self, method: str) -> _Reply | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue.popleft()
        if fault.kind == "http429":
            return _Reply(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(fault.retry_after)},
            )
        return _error(fault.error, **fault.extra)

    def _scope_refusal(self, method: str) -> _Reply | None:
        refused = missing_scope(method, self.scopes)
        if refused is None:
            return None
        body, accepted = refused
        return _Reply(body, headers={"X-Accepted-OAuth-Scopes": accepted})

    def _dispatch(self, method: str, args: dict[str, Any], token: str | None) -> _Reply:
        if method not in self._methods and method not in self._custom:
            return _error("unknown_method", req_method=method)
        if not token:
            return _error("not_authed")
        if not (token.startswith("xox") or token.startswith("xapp-")):
            return _error("invalid_auth")
        if method == "apps.connections.open":
            if not token.startswith("xapp-"):
                return _error("not_allowed_token_type")
        elif token.startswith("xapp-"):
            return _error("not_allowed_token_type")
        refused = self._queued_fault(method) or self._scope_refusal(method)
        if refused is not None:
            return refused
        if method in self._custom:
            return _Reply(self._custom[method](args))
        return self._methods[method](args, token)

    async def _api(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        method = request.match_info["method"]
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            self.api_peers.add((str(peer[0]), int(peer[1])))
        args = await self._read_args(request)
        token = self._bearer(request) or (str(args["token"]) if args.get("token") else None)
        dropped = method in _READS and str(args.get("channel")) in self._unreadable
        reply = _error("connection_dropped") if dropped else self._dispatch(method, args, token)
        self.calls.append(
            Call(
                method=method,
                verb=request.method,
                token=token,
                args=args,
                headers=dict(request.headers),
                at=arrived,
                status=reply.status,
                response=reply.body,
            )
        )
        for hold in list(self._holds):
            if hold.matches(method, args):
                hold.calls.append(self.calls[-1])
                await hold.wait()
        if dropped and request.transport is not None:
            request.transport.close()
        headers = dict(reply.headers)
        if token and token.startswith("xoxb-"):
            headers["X-OAuth-Scopes"] = ",".join(self.scopes)
        return web.json_response(reply.body, status=reply.status, headers=headers)

    def _auth_test(self, args: dict[str, Any], token: str) -> _Reply:
        return _Reply(
            {
                "ok": True,
                "url": f"https://{self.team.lower().replace(' ', '-')}.slack.com/",
                "team": self.team,
                "user": self.bot_name,
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            }
        )

    def _find_message(self, channel: str, ts: str) -> dict[str, Any] | None:
        for message in self._messages.get(channel, []):
            if message["ts"] == ts:
                return message
        return None

    def _chat_post_message(self, args: dict[str, Any], token: str) -> _Reply:
        channel = args.get("channel")
        if not channel:
            return _error("channel_not_found")
        text, blocks = args.get("text"), args.get("blocks")
        if not text and not blocks and not args.get("attachments"):
            return _error("no_text")
        ts = self.next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": text or "",
            "ts": ts,
            "team": self.team_id,
        }
        if blocks:
            message["blocks"] = blocks
        if args.get("metadata"):
            # Served back by conversations.replies (Slack needs include_all_metadata=true).
            message["metadata"] = args["metadata"]
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        self._messages.setdefault(str(channel), []).append(message)
        return _Reply({"ok": True, "channel": channel, "ts": ts, "message": dict(message)})

    def _chat_update(self, args: dict[str, Any], token: str) -> _Reply:
        channel, ts = args.get("channel"), args.get("ts")
        if not channel:
            return _error("channel_not_found")
        if not ts:
            return _error("message_not_found")
        text, blocks = args.get("text"), args.get("blocks")
        if text is None and blocks is None and args.get("attachments") is None:
            return _error("no_text")
        message = self._find_message(str(channel), str(ts))
        if message is None:
            if self.strict:
                return _error("message_not_found")
            message = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id}
        else:
            message["edited"] = {"user": self.bot_user_id, "ts": self.next_ts()}
        if text is not None:
            message["text"] = text
        if blocks is not None:
            message["blocks"] = blocks
        return _Reply(
            {
                "ok": True,
                "channel": channel,
                "ts": ts,
                "text": message.get("text", ""),
                "message": {k: v for k, v in message.items() if k != "ts"},
            }
        )

    def _chat_post_ephemeral(self, args: dict[str, Any], token: str) -> _Reply:
        if not args.get("channel"):
            return _error("channel_not_found")
        if not args.get("user"):
            return _error("user_not_in_channel")
        if not args.get("text") and not args.get("blocks") and not args.get("attachments"):
            return _error("no_text")
        return _Reply({"ok": True, "message_ts": self.next_ts()})

    def _reactions_add(self, args: dict[str, Any], token: str) -> _Reply:
        channel, timestamp, name = args.get("channel"), args.get("timestamp"), args.get("name")
        if not channel:
            return _error("channel_not_found")
        if not timestamp:
            return _error("no_item_specified")
        if not name:
            return _error("invalid_name")
        key = (str(channel), str(timestamp), str(name))
        if key in self.reactions:
            return _error("already_reacted")
        self.reactions.append(key)
        return _Reply({"ok": True})

    def _conversations_replies(self, args: dict[str, Any], token: str) -> _Reply:
        channel, ts = args.get("channel"), args.get("ts")
        if not channel:
            return _error("channel_not_found")
        if not ts:
            return _error("invalid_arguments")
        messages = self.thread(str(channel), str(ts))
        if not messages and self.strict:
            return _error("thread_not_found")
        served = [self._with_thread_fields(m, messages) for m in messages]
        # Slack pages oldest first: `limit` messages from `cursor` (an offset here).
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 1000)
        page = served[start : start + limit]
        rest = start + limit < len(served)
        return _Reply(
            {
                "ok": True,
                "messages": page,
                "has_more": rest,
                "response_metadata": {"next_cursor": str(start + limit) if rest else ""},
            }
        )

    def _conversations_history(self, args: dict[str, Any], token: str) -> _Reply:
        channel = args.get("channel")
        if not channel:
            return _error("channel_not_found")
        oldest = float(args.get("oldest") or 0)
        # Top-level messages only (thread parents included, replies not), newest first.
        top = [
            m
            for m in self._messages.get(str(channel), [])
            if m.get("thread_ts") in (None, m["ts"]) and float(m["ts"]) > oldest
        ]
        top.sort(key=_ts_key, reverse=True)
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 100)
        page = [dict(m) for m in top[start : start + limit]]
        rest = start + limit < len(top)
        return _Reply(
            {
                "ok": True,
                "messages": page,
                "has_more": rest,
                "response_metadata": {"next_cursor": str(start + limit) if rest else ""},
            }
        )

    @staticmethod
    def _with_thread_fields(
        message: dict[str, Any], thread: list[dict[str, Any]]
    ) -> dict[str, Any]:
        out = dict(message)
        parent = next((m for m in thread if m["ts"] == m.get("thread_ts")), None)
        if parent is None:
            return out
        replies = [m for m in thread if m is not parent]
        if message is parent:
            out["reply_count"] = len(replies)
            out["reply_users"] = sorted({str(m.get("user")) for m in replies if m.get("user")})
            if replies:
                out["latest_reply"] = replies[-1]["ts"]
        elif parent.get("user"):
            out["parent_user_id"] = parent["user"]
        return out

    def _users_info(self, args: dict[str, Any], token: str) -> _Reply:
        user = self._users.get(str(args.get("user") or ""))
        if user is None:
            return _error("user_not_found")
        return _Reply({"ok": True, "user": user})

    def _views_open(self, args: dict[str, Any], token: str) -> _Reply:
        if not args.get("trigger_id"):
            return _error("invalid_arguments")
        view = args.get("view")
        if not isinstance(view, dict):
            return _error("invalid_arguments")
        self._view_seq += 1
        served = {
            "id": f"V{self._view_seq:08d}",
            "team_id": self.team_id,
            "type": view.get("type", "modal"),
            "title": view.get("title"),
            "submit": view.get("submit"),
            "close": view.get("close"),
            "blocks": view.get("blocks", []),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "external_id": view.get("external_id", ""),
            "state": {"values": {}},
            "hash": f"{1_700_000_000 + self._view_seq}.{uuid.uuid4().hex[:8]}",
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "root_view_id": f"V{self._view_seq:08d}",
            "previous_view_id": None,
            "app_id": self.app_id,
            "bot_id": self.bot_id,
        }
        self.views.append(served)
        return _Reply({"ok": True, "view": served})

    def _apps_connections_open(self, args: dict[str, Any], token: str) -> _Reply:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        ws_base = self.base_url.replace("http://", "ws://", 1)
        return _Reply({"ok": True, "url": f"{ws_base}/link/?ticket={ticket}&app_id={self.app_id}"})

    # -- uploads and thread status -----------------------------------------------------------

    def _files_get_upload_url(self, args: dict[str, Any], token: str) -> _Reply:
        return _Reply(self.uploads.start(args))

    def _files_complete_upload(self, args: dict[str, Any], token: str) -> _Reply:
        items = self.uploads.parse_files(args)
        if items is None:
            return _error("invalid_arguments")
        missing = self.uploads.missing(items)
        if missing is not None:
            return _error("file_not_found", file_id=missing)
        channel = str(args["channel_id"]) if args.get("channel_id") else None
        if channel is None and args.get("channels"):
            channel = str(args["channels"]).split(",")[0]
        thread_ts = str(args["thread_ts"]) if args.get("thread_ts") else None
        if thread_ts is not None and channel is None:
            return _error("invalid_arguments")
        if self.strict and thread_ts is not None and not self.thread(str(channel), thread_ts):
            return _error("thread_not_found")
        comment = str(args["initial_comment"]) if args.get("initial_comment") else None
        message_ts = self.next_ts() if channel is not None else None
        shared = self.uploads.complete(
            items,
            channel=channel,
            thread_ts=thread_ts,
            comment=comment,
            message_ts=message_ts,
            at=time.time(),
        )
        for file in shared:
            self._files[file.file_id] = _File(file.file_id, file.name, file.data, file.mimetype)
        if channel is not None and message_ts is not None:
            self._share_message(channel, thread_ts, comment, message_ts, shared)
        return _Reply(
            {
                "ok": True,
                "files": [self.uploads.file_object(f, with_shares=False) for f in shared],
            }
        )

    def _share_message(
        self,
        channel: str,
        thread_ts: str | None,
        comment: str | None,
        ts: str,
        shared: list[SharedFile],
    ) -> None:
        """The message that carries shared files, as `conversations.history/replies` show it."""
        message: dict[str, Any] = {
            "type": "message",
            "subtype": "file_share",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": comment or "",
            "ts": ts,
            "team": self.team_id,
            "upload": True,
            "display_as_bot": False,
            "files": [self.uploads.file_object(f, with_shares=True) for f in shared],
        }
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        self._messages.setdefault(channel, []).append(message)

    def _files_info(self, args: dict[str, Any], token: str) -> _Reply:
        file_id = str(args.get("file") or "")
        for shared in self.uploads.shared:
            if shared.file_id == file_id:
                return _Reply(
                    {"ok": True, "file": self.uploads.file_object(shared, with_shares=True)}
                )
        return _error("file_not_found")

    def _assistant_set_status(self, args: dict[str, Any], token: str) -> _Reply:
        return _Reply(self.statuses.set(args, self.now()))

    async def _upload(self, request: web.Request) -> web.Response:
        """The upload URL: raw bytes (what slack_sdk sends) or a multipart `file` part."""
        file_id = request.match_info["file_id"]
        data = b""
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = form.get("file") or form.get("filename")
            if isinstance(part, web.FileField):
                data = part.file.read()
            elif isinstance(part, str):
                data = part.encode()
        else:
            data = await request.read()
        status, text = self.uploads.receive(file_id, data)
        return web.Response(status=status, text=text)

    # -- clock ----------------------------------------------------------------------------

    def now(self) -> float:
        """The fake's clock: `time.monotonic()` moved on by `advance`."""
        return time.monotonic() + self._clock_offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on (e.g. past the two minutes a thread status lasts)."""
        self._clock_offset += seconds

    # -- inspection: uploads, statuses, commands -----------------------------------------

    @property
    def shared_files(self) -> list[SharedFile]:
        """Every completed upload, oldest first."""
        return list(self.uploads.shared)

    def files_in(self, channel: str, thread_ts: str | None = None) -> list[SharedFile]:
        """Completed uploads shared to a channel (and, if given, to one thread of it)."""
        return [
            f
            for f in self.uploads.shared
            if f.channel == channel and (thread_ts is None or f.thread_ts == thread_ts)
        ]

    async def wait_for_files(
        self, count: int = 1, channel: str | None = None, within: float = 5.0
    ) -> list[SharedFile]:
        """Wait until `count` uploads were completed (to `channel`, if given)."""

        def matching() -> list[SharedFile]:
            return [f for f in self.uploads.shared if channel is None or f.channel == channel]

        def probe() -> list[SharedFile] | None:
            found = matching()
            return found if len(found) >= count else None

        def why() -> str:
            return (
                f"expected {count} shared file(s) (channel={channel!r}) within {within}s, got "
                f"{len(matching())}; {self._describe_calls()}"
            )

        return await self._poll(probe, within, why)

    def status_history(self, channel_id: str, thread_ts: str) -> list[StatusUpdate]:
        """Every `assistant.threads.setStatus` accepted for one thread, oldest first."""
        return self.statuses.history(channel_id, thread_ts)

    def status_texts(self, channel_id: str, thread_ts: str) -> list[str]:
        """The statuses set on one thread, oldest first ("" is a clear)."""
        return self.statuses.texts(channel_id, thread_ts)

    def current_status(self, channel_id: str, thread_ts: str) -> str:
        """The status Slack shows under the thread now: "" once cleared, after a reply by
        the app in the thread, or two minutes (of `now()`) after it was set."""
        replies = [
            c.at
            for c in self.calls
            if c.ok
            and c.method in ("chat.postMessage", "files.completeUploadExternal")
            and (c.args.get("channel") or c.args.get("channel_id")) == channel_id
            and str(c.args.get("thread_ts") or "") == thread_ts
        ]
        return self.statuses.current(
            channel_id,
            thread_ts,
            now=self.now(),
            last_reply_at=max(replies) if replies else None,
        )

    def ephemeral_posts(self, user: str | None = None) -> list[dict[str, Any]]:
        """Arguments of successful `chat.postEphemeral` calls (optionally to one user)."""
        return [
            c.args
            for c in self.calls_to("chat.postEphemeral")
            if c.ok and (user is None or c.args.get("user") == user)
        ]

    async def send_slash_command(
        self,
        text: str,
        *,
        user: str = "U1",
        channel: str = "C0GENERAL",
        command: str = "/raven",
        user_name: str | None = None,
        within: float = 5.0,
    ) -> SlashCommand:
        """A user types `command text` in `channel`: a `slash_commands` envelope goes to the
        connected app and this waits for its ack. The payload's `response_url` points at this
        fake; read what the app sent there with `responses_to(cmd)`."""
        payload, response_url_id = self.slash_command_payload(
            text, user=user, channel=channel, command=command, user_name=user_name
        )
        envelope_id = await self.send_envelope("slash_commands", payload)
        ack = await self.wait_for_ack(envelope_id, within)
        return SlashCommand(envelope_id, payload, ack, response_url_id)

    def slash_command_payload(
        self,
        text: str,
        *,
        user: str = "U1",
        channel: str = "C0GENERAL",
        command: str = "/raven",
        user_name: str | None = None,
    ) -> tuple[dict[str, str], str]:
        """A slash-command payload whose `response_url` is a fresh one on this fake, and that
        URL's id (to POST over HTTP yourself; Socket Mode: `send_slash_command`)."""
        self._command_seq += 1
        response_url_id = f"cmd-{self._command_seq}"
        payload = payloads.slash_command(
            command,
            text,
            user,
            channel,
            self.response_url(response_url_id),
            user_name=user_name,
            team_id=self.team_id,
            api_app_id=self.app_id,
        )
        return payload, response_url_id

    def responses_to(self, command: SlashCommand) -> list[ResponseUrlPost]:
        """What the app POSTed to a slash command's `response_url`, oldest first."""
        return [p for p in self.response_url_posts if p.id == command.response_url_id]

    # -- files and response_url --------------------------------------------------------------

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        token = self._bearer(request)
        if not token or not token.startswith("xoxb-"):
            self.file_downloads.append((file_id, 401))
            return web.Response(status=401, text="not authed")
        file = self._files.get(file_id)
        if file is None or file.name != request.match_info["name"]:
            self.file_downloads.append((file_id, 404))
            return web.Response(status=404, text="file not found")
        self.file_downloads.append((file_id, 200))
        return web.Response(body=file.data, content_type=file.mimetype)

    async def _response_url(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.response_url_posts.append(
            ResponseUrlPost(request.match_info["id"], body, dict(request.headers), arrived)
        )
        return web.json_response({"ok": True})

    # -- Socket Mode -------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """How many Socket Mode connections are open now."""
        return sum(1 for ws in self._sockets if not ws.closed)

    async def wait_connected(self, within: float = 5.0, count: int = 1) -> None:
        """Wait until `count` connections were made in total and one is open now."""

        def probe() -> bool | None:
            return True if self.connection_count >= count and self.open_connections else None

        def why() -> str:
            return (
                f"expected {count} Socket Mode connection(s) within {within}s; made "
                f"{self.connection_count}, open {self.open_connections}; {self._describe_calls()}"
            )

        await self._poll(probe, within, why)

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # tickets are single-use
        ws = web.WebSocketResponse(autoping=True, timeout=1.0)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connection_count += 1
        self.connected.set()
        try:
            await ws.send_json(
                {
                    "type": "hello",
                    "num_connections": self.open_connections,
                    "debug_info": {
                        "host": "applink-fake",
                        "build_number": 1,
                        "approximate_connection_time": 18060,
                    },
                    "connection_info": {"app_id": self.app_id},
                }
            )
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    data = json.loads(msg.data)
                except ValueError:
                    continue
                if not isinstance(data, dict):
                    continue
                self.socket_messages.append(data)
                envelope_id = data.get("envelope_id")
                if isinstance(envelope_id, str):
                    self.acks[envelope_id] = data
        finally:
            self._sockets.remove(ws)
            if not self.open_connections:
                self.connected.clear()
        return ws

    def _current_socket(self) -> web.WebSocketResponse:
        for ws in reversed(self._sockets):
            if not ws.closed:
                return ws
        raise AssertionError(
            f"no open Socket Mode connection (made {self.connection_count}); "
            f"{self._describe_calls()}"
        )

    async def send_envelope(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        accepts_response_payload: bool | None = None,
    ) -> str:
        """Send an envelope (events_api / interactive / slash_commands) to the newest open
        connection; returns its envelope_id. `payload` is the JSON Slack would POST over HTTP.

        `accepts_response_payload` defaults to Slack's: true for slash commands and for
        view_submission / block_suggestion interactions, false otherwise.
        """
        ws = self._current_socket()
        if accepts_response_payload is None:
            accepts_response_payload = type == "slash_commands" or (
                type == "interactive"
                and payload.get("type") in ("view_submission", "block_suggestion")
            )
        envelope_id = str(uuid.uuid4())
        frame: dict[str, Any] = {
            "envelope_id": envelope_id,
            "type": type,
            "payload": payload,
            "accepts_response_payload": accepts_response_payload,
        }
        if type == "events_api":
            frame["retry_attempt"] = retry_attempt
            frame["retry_reason"] = retry_reason
        await ws.send_json(frame)
        self.envelopes.append(Envelope(envelope_id, type, payload, frame, time.monotonic()))
        return envelope_id

    async def wait_for_ack(self, envelope_id: str, within: float = 5.0) -> dict[str, Any]:
        """Wait for the client's ack of `envelope_id`; returns the ack JSON."""

        def why() -> str:
            return (
                f"no ack for envelope {envelope_id} within {within}s; acked: {list(self.acks)}; "
                f"{self._describe_calls()}"
            )

        return await self._poll(lambda: self.acks.get(envelope_id), within, why)

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Send a `disconnect` frame (the client should reconnect via apps.connections.open)."""
        ws = self._current_socket()
        await ws.send_json(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        )

    async def drop_connections(self, code: int = 1001) -> None:
        """Close every open Socket Mode connection from the server side."""
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=code, message=b"dropped by fake")
