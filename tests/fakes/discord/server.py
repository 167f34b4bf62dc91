"""A loopback fake of Discord (REST API v10 + gateway WebSocket) for the real discord.py client.

Everything is served by one aiohttp app on 127.0.0.1 (port 0). It mirrors the client
behaviour recorded in `/work/shared/notes/testing-discord-offline.md`:

* JSON replies carry `Content-Type: application/json` exactly (discord.py compares by equality);
* the gateway speaks plain-text JSON frames (accepted whatever `compress` the client asks for),
  answers heartbeats, sends READY (with a `resume_gateway_url` back to this server) and
  GUILD_CREATE, replays stored events on RESUME and answers an unknown session with
  INVALID_SESSION;
* interaction callbacks answer 200 JSON `{"interaction": {...}}` (discord.py >= 2.5 parses it);
* 429s carry `Via` and a JSON `retry_after`, which is what makes discord.py retry.

Application commands (commands.py) are registered per guild and globally, and invoked with
`invoke_command`; interaction tokens expire on the fake's clock (`now`, `advance`) with
Discord's errors; typing indicators and upload sizes are checked and recorded.

Like Discord, the bot's own REST writes come back over the gateway (MESSAGE_CREATE, _UPDATE,
_DELETE, THREAD_CREATE) unless `echo_bot_messages` is False, and MESSAGE_CREATE content is
blanked for a session that did not ask for the message-content intent.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import math
import mimetypes
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import discord.gateway
import discord.http
import pytest
import yarl
from aiohttp import BodyPartReader, WSMsgType, web

from tests.fakes.discord import payloads
from tests.fakes.discord.commands import CommandRegistry, command_problem
from tests.helpers import eventually

__all__ = [
    "INTERACTION_TTL_S",
    "MESSAGE_CONTENT_INTENT",
    "FakeDiscord",
    "Hold",
    "Recorded",
    "StoredAttachment",
    "UploadedFile",
]

JSON = dict[str, Any]

MESSAGE_CONTENT_INTENT = 1 << 15
EPHEMERAL = 1 << 6
LOADING = 1 << 7
SUPPRESS_EMBEDS = 1 << 2
MAX_CONTENT = 2000
# Discord dedups `enforce_nonce` sends "within the past few minutes".
NONCE_WINDOW_S = 300.0
# An interaction token lives 15 minutes; the first response is due within 3 seconds.
INTERACTION_TTL_S = 15 * 60.0
_POLL_INTERVAL = 0.005
_MESSAGE_KEYS = ("content", "embeds", "components", "poll", "sticker_ids")
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_THREAD_TYPES = frozenset({10, 11, 12})


@dataclass(frozen=True)
class UploadedFile:
    """One file part of a multipart request."""

    field: str
    filename: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class StoredAttachment:
    """A file the bot attached to a message, as Discord stored it."""

    message_id: str
    filename: str
    size: int
    content_type: str | None
    data: bytes


@dataclass
class Recorded:
    """One REST request as the fake saw it; `status` is filled in once it is answered."""

    method: str
    path: str  # without the /api/v10 prefix
    query: dict[str, str]
    json: Any
    headers: dict[str, str]
    status: int = 0
    files: list[UploadedFile] = field(default_factory=list)


@dataclass
class _Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        if self.body is None:
            return web.Response(status=self.status)
        # Exactly "application/json": web.json_response adds "; charset=utf-8", which
        # discord.py's json_or_text does not recognise (it then returns the raw text).
        headers = {"Content-Type": "application/json", **self.headers}
        return web.Response(
            status=self.status, body=json.dumps(self.body).encode(), headers=headers
        )


def _error(status: int, message: str, code: int = 0, errors: JSON | None = None) -> _Reply:
    body: JSON = {"message": message, "code": code}
    if errors is not None:
        body["errors"] = errors
    return _Reply(status, body)


def _not_found(what: str, code: int) -> _Reply:
    return _error(404, f"Unknown {what}", code)


def _invalid_form(key: str, code: str, message: str) -> _Reply:
    errors = {key: {"_errors": [{"code": code, "message": message}]}}
    return _error(400, "Invalid Form Body", 50035, errors)


@dataclass
class _Call:
    """A parsed request handed to route handlers."""

    method: str
    path: str
    query: dict[str, str]
    json: Any
    files: list[UploadedFile]
    headers: dict[str, str]

    @property
    def body(self) -> JSON:
        return self.json if isinstance(self.json, dict) else {}


Handler = Callable[[_Call, dict[str, str]], Awaitable[_Reply]]


@dataclass
class _Route:
    method: str
    regex: re.Pattern[str]
    handler: Handler
    auth: bool


def _compile(template: str) -> re.Pattern[str]:
    """A route template as a regex: `{name}` is a snowflake, `{name*}` any one segment
    (tokens, `@original`)."""
    pattern = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            name = part[1:-1]
            if name.endswith("*"):
                pattern += f"(?P<{name[:-1]}>[^/]+)"
            else:
                pattern += f"(?P<{name}>\\d+)"
        else:
            pattern += re.escape(part)
    return re.compile(f"^{pattern}$")


def _path_matches(pattern: str, path: str) -> bool:
    """Whether `path` matches a fault pattern: segments equal, or `*` / `{...}` for any one."""
    want, got = pattern.strip("/").split("/"), path.strip("/").split("/")
    if len(want) != len(got):
        return False
    return all(
        w == "*" or (w.startswith("{") and w.endswith("}")) or w == g
        for w, g in zip(want, got, strict=True)
    )


@dataclass
class _Fault:
    method: str
    pattern: str
    reply: _Reply
    remaining: int

    def matches(self, method: str, path: str) -> bool:
        return (
            self.remaining > 0
            and self.method in ("*", method.upper())
            and _path_matches(self.pattern, path)
        )


@dataclass
class Hold:
    """Holds REST requests matching `method` and `path_pattern` (as for `fail`) until
    `release()`, to put a client's crash exactly between two effects.

    `served=True`: the request takes effect at once (a message is stored and echoed) and only
    its answer waits: Discord has it, the client has not heard. `served=False`: the request
    waits before it takes effect, and on release it is dropped (the connection is closed,
    nothing is stored): Discord never got it.
    """

    method: str
    pattern: str
    served: bool = True
    when: Callable[[Recorded], bool] | None = None  # only requests it accepts
    calls: list[Recorded] = field(default_factory=list)
    _gate: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, request: Recorded) -> bool:
        """Whether a request is held (never after release)."""
        return (
            not self._gate.is_set()
            and self.method in ("*", request.method.upper())
            and _path_matches(self.pattern, request.path)
            and (self.when is None or self.when(request))
        )

    def release(self) -> None:
        """Let every held request go (answered, or dropped when not served) and stop holding."""
        self._gate.set()

    async def wait(self) -> None:
        """Block until released (used by the fake's request handler)."""
        await self._gate.wait()

    async def wait_held(self, count: int = 1, within: float = 5.0) -> list[Recorded]:
        """Wait until `count` requests are being held; returns them."""
        await eventually(
            lambda: len(self.calls) >= count,
            within,
            what=lambda: f"{count} held {self.method} {self.pattern}, got {len(self.calls)}",
            every=_POLL_INTERVAL,
        )
        return list(self.calls)


@dataclass
class _Session:
    session_id: str
    token: str
    intents: int
    seq: int = 0
    events: list[JSON] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None
    ready: bool = False


@dataclass
class _Interaction:
    id: str
    token: str
    type: int
    channel_id: str
    user_id: str
    message_id: str | None
    callback_type: int | None = None
    response_id: str | None = None
    loading: bool = False  # a type-5 "thinking" message not yet completed
    followup_ids: list[str] = field(default_factory=list)
    created_at: float = 0.0  # the fake's clock


@dataclass
class _Blob:
    data: bytes
    content_type: str


class FakeDiscord:
    """A fake Discord on 127.0.0.1: REST under `/api/v10`, the gateway on `/gateway`.

    `async with FakeDiscord() as fake:` then `fake.patch(monkeypatch)` before starting a
    `discord.Client`. Build the world with `add_user` / `add_channel` / `add_role` (before the
    client connects: later additions are not announced over the gateway), drive it with
    `send_message`, `click`, `submit_modal`, `dispatch`, `close_gateway`, `queue_missed`, inject
    faults with `rate_limit` / `fail`, and assert on `requests`, `messages`, `threads`,
    `interaction_callbacks`, `followups` and an empty `unknown`.
    """

    def __init__(
        self,
        *,
        bot_id: str = "900000000000000001",
        app_id: str = "900000000000000002",
        guild_id: str = "800000000000000001",
        heartbeat_interval_ms: int = 41250,
        interaction_ttl_s: float = INTERACTION_TTL_S,
        callback_window_s: float | None = None,
        max_upload_bytes: int = payloads.ATTACHMENT_SIZE_LIMIT,
    ) -> None:
        self.bot_id = bot_id
        self.app_id = app_id
        self.guild_id = guild_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # Tokens die `interaction_ttl_s` after the interaction; with `callback_window_s` set
        # (Discord: 3 s) a late initial response is refused too (off by default: slow CI).
        self.interaction_ttl_s = interaction_ttl_s
        self.callback_window_s = callback_window_s
        self.max_upload_bytes = max_upload_bytes
        self.guild_name = "Fake Guild"
        # Real Discord echoes the bot's own writes over the gateway; a bot must ignore them.
        self.echo_bot_messages = True

        self.base_url = ""
        self.gateway_url = ""
        self.resume_gateway_url = ""
        self.port = 0

        # observations
        self.requests: list[Recorded] = []
        self.messages: dict[str, dict[str, JSON]] = {}
        self.threads: dict[str, JSON] = {}
        self.interaction_callbacks: list[JSON] = []
        self.followups: list[JSON] = []
        self.identifies = 0
        self.resumes = 0
        self.connections = 0
        self.unknown: list[str] = []
        self.gateway_received: list[JSON] = []  # every frame a client sent, heartbeats included
        self.gateway_paths: list[str] = []  # the path of each WebSocket connection
        self.downloads: list[str] = []  # attachment names served
        self.typing: list[tuple[str, float]] = []  # (channel id, fake clock) per typing POST

        self._ids = payloads.Snowflakes()
        self._clock_offset = 0.0
        self.commands = CommandRegistry(app_id, self._ids.next)
        self._created = payloads.timestamp()
        self._owner = payloads.user("900000000000000099", "fake-owner", global_name="Owner")
        self._users: dict[str, JSON] = {}
        self._members: dict[str, JSON] = {}  # user_id -> {nick, roles, joined_at}
        self._roles: dict[str, JSON] = {}
        self._channels: dict[str, JSON] = {}
        self._dms: dict[str, JSON] = {}
        self._dm_by_user: dict[str, str] = {}
        self._ephemeral: dict[str, JSON] = {}
        self._blobs: dict[str, _Blob] = {}
        self._nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self._faults: list[_Fault] = []
        self._holds: list[Hold] = []
        self._interactions: dict[str, _Interaction] = {}
        self._by_token: dict[str, str] = {}
        self._sessions: dict[str, _Session] = {}
        self._session: _Session | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._runner: web.AppRunner | None = None
        self._routes = self._route_table()

        self._users[bot_id] = payloads.user(bot_id, "raven", global_name="Raven", bot=True)
        self._members[bot_id] = {"nick": None, "roles": [], "joined_at": self._created}
        self._roles[guild_id] = payloads.role(guild_id, "@everyone")
        self.add_channel("700000000000000001", "general")
        self.add_channel("700000000000000002", "random")

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind 127.0.0.1 on a free port and serve REST, attachments and the gateway."""
        # Bodies as large as an upload may be (aiohttp's default cap is 1 MiB; a multipart
        # request carries a little more than its files).
        app = web.Application(client_max_size=self.max_upload_bytes + 2**16)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._api)
        app.router.add_get("/attachments/{name:.+}", self._attachment)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway-resume", self._gateway)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.base_url = f"http://127.0.0.1:{self.port}/api/v10"
        self.gateway_url = f"ws://127.0.0.1:{self.port}/gateway"
        self.resume_gateway_url = f"ws://127.0.0.1:{self.port}/gateway-resume"

    async def stop(self) -> None:
        """Close gateway connections (1001) and stop serving."""
        for hold in self._holds:
            hold.release()
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001, message=b"fake stopping")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point discord.py's REST base and default gateway at this fake (process-wide)."""
        if not self.base_url:
            raise RuntimeError("start the fake before patching discord.py")
        monkeypatch.setattr(discord.http.Route, "BASE", self.base_url)
        # A yarl.URL, not a str: discord.py calls .with_query() on it (since 2.1).
        monkeypatch.setattr(
            discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(self.gateway_url)
        )

    # -- world -------------------------------------------------------------------------------

    @property
    def bot_user(self) -> JSON:
        """The bot's user object."""
        return self._users[self.bot_id]

    def add_user(
        self,
        user_id: str,
        username: str,
        *,
        global_name: str | None = None,
        bot: bool = False,
        nick: str | None = None,
        roles: Sequence[str] = (),
    ) -> JSON:
        """Add a guild member; returns its user object."""
        self._ids.observe(user_id)
        obj = payloads.user(user_id, username, global_name=global_name, bot=bot)
        self._users[user_id] = obj
        self._members[user_id] = {"nick": nick, "roles": list(roles), "joined_at": self._created}
        return obj

    def add_channel(self, channel_id: str, name: str, *, type: int = 0) -> JSON:
        """Add a guild channel (text by default); returns the channel object."""
        self._ids.observe(channel_id)
        obj = payloads.guild_channel(
            channel_id, name, guild_id=self.guild_id, type=type, position=len(self._channels)
        )
        self._channels[channel_id] = obj
        return obj

    def add_role(self, role_id: str, name: str) -> JSON:
        """Add a guild role; returns the role object."""
        self._ids.observe(role_id)
        obj = payloads.role(role_id, name, position=len(self._roles))
        self._roles[role_id] = obj
        return obj

    def add_attachment(
        self, name: str, data: bytes, *, content_type: str = "application/octet-stream"
    ) -> JSON:
        """Serve `data` at `/attachments/{name}`; returns the attachment object to pass to
        `send_message(attachments=[...])`."""
        self._blobs[name] = _Blob(data, content_type)
        return payloads.attachment(
            self._ids.next(),
            name.rsplit("/", 1)[-1],
            size=len(data),
            url=self._attachment_url(name),
            content_type=content_type,
        )

    def channel(self, channel_id: str) -> JSON | None:
        """The guild channel, thread or DM channel with this id, if the fake knows it."""
        return (
            self._channels.get(channel_id)
            or self.threads.get(channel_id)
            or self._dms.get(channel_id)
        )

    def dm_channel_for(self, user_id: str) -> JSON:
        """The DM channel between the bot and a user (created on first use)."""
        channel_id = self._dm_by_user.get(user_id)
        if channel_id is None:
            channel_id = self._ids.next()
            self._open_dm_channel(channel_id, user_id)
        return self._dms[channel_id]

    def _open_dm_channel(self, channel_id: str, user_id: str) -> None:
        self._dms[channel_id] = payloads.dm_channel(channel_id, self._user(user_id))
        self._dm_by_user[user_id] = channel_id

    def _user(self, user_id: str) -> JSON:
        try:
            return self._users[user_id]
        except KeyError:
            raise KeyError(f"unknown user {user_id}: call fake.add_user() first") from None

    def _attachment_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/attachments/{name}"

    def _guild_of(self, channel_id: str) -> str | None:
        return None if channel_id in self._dms else self.guild_id

    def _mention_objects(self, user_ids: Iterable[str], guild_id: str | None) -> list[JSON]:
        out: list[JSON] = []
        for user_id in dict.fromkeys(user_ids):  # dedup, keep order
            obj = self._users.get(user_id)
            if obj is None:
                continue  # Discord drops mentions of users it cannot resolve
            mention = dict(obj)
            if guild_id is not None and user_id in self._members:
                mention["member"] = self._partial_member(user_id)
            out.append(mention)
        return out

    def _partial_member(self, user_id: str) -> JSON:
        info = self._members[user_id]
        return payloads.partial_member(
            nick=info["nick"], roles=info["roles"], joined_at=info["joined_at"]
        )

    def _full_member(self, user_id: str) -> JSON:
        info = self._members[user_id]
        return payloads.member(
            self._users[user_id],
            nick=info["nick"],
            roles=info["roles"],
            joined_at=info["joined_at"],
        )

    # -- observations ------------------------------------------------------------------------

    def bot_messages(self, channel_id: str | None = None) -> list[JSON]:
        """Messages authored by the bot (current, edited state), in creation order."""
        if channel_id is not None:
            stored = list(self.messages.get(channel_id, {}).values())
        else:
            # Across channels: the bot's ids are issued in increasing order.
            stored = sorted(
                (m for msgs in self.messages.values() for m in msgs.values()),
                key=lambda m: int(m["id"]),
            )
        return [m for m in stored if m["author"]["id"] == self.bot_id]

    def requests_to(self, method: str, path_pattern: str) -> list[Recorded]:
        """Recorded requests matching a method and a path pattern (as for `fail`)."""
        return [
            r
            for r in self.requests
            if method.upper() in ("*", r.method) and _path_matches(path_pattern, r.path)
        ]

    def describe(self) -> str:
        """A one-paragraph summary of what the fake has seen, for failure messages."""
        recent = ", ".join(f"{r.method} {r.path} ({r.status})" for r in self.requests[-12:])
        return (
            f"identifies={self.identifies} resumes={self.resumes} "
            f"connections={self.connections} open={self.open_connections}; "
            f"last requests: {recent or 'none'}; unknown routes: {self.unknown}; "
            f"interaction callbacks: {[c['type'] for c in self.interaction_callbacks]}"
        )

    @property
    def open_connections(self) -> int:
        """Gateway connections open now."""
        return sum(1 for ws in self._sockets if not ws.closed)

    async def wait_for(
        self,
        predicate: Callable[[], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 - a bounded wait is the point of this helper
    ) -> None:
        """Poll `predicate` every 5 ms until true; AssertionError (with context) otherwise.

        Polling rather than a condition the fake notifies: predicates usually read the
        client's state as well, which changes without the fake knowing.
        """
        await eventually(
            predicate,
            timeout,
            what=lambda: f"{_describe_predicate(predicate)}; {self.describe()}",
            every=_POLL_INTERVAL,
        )

    async def wait_ready(
        self,
        timeout: float = 10.0,  # noqa: ASYNC109 - a bounded wait is the point of this helper
    ) -> None:
        """Wait until a client has IDENTIFYed and READY + GUILD_CREATE were sent to it."""
        await self.wait_for(lambda: self._session is not None and self._session.ready, timeout)

    # -- driving the gateway -----------------------------------------------------------------

    def _current(self) -> _Session:
        if self._session is None:
            raise RuntimeError(f"no client has identified yet; {self.describe()}")
        return self._session

    def _store(self, session: _Session, t: str, d: JSON) -> JSON:
        session.seq += 1
        # A snapshot: stored messages change later (edits), a replayed event must not.
        frame: JSON = {"op": 0, "t": t, "s": session.seq, "d": copy.deepcopy(d)}
        session.events.append(frame)
        return frame

    async def dispatch(self, t: str, d: JSON) -> None:
        """Send a DISPATCH event with the next seq (stored for RESUME replay).

        With the socket down the event is only stored, and the RESUME replay delivers it.
        """
        session = self._current()
        frame = self._store(session, t, d)
        if session.ws is not None and not session.ws.closed:
            await self._send(session, session.ws, frame)

    def queue_missed(self, t: str, d: JSON) -> None:
        """Store an event the client never got (as if sent while the socket was down); the
        next RESUME replays it."""
        self._store(self._current(), t, d)

    def forget_sessions(self) -> None:
        """Forget every gateway session (as after Discord restarts): the next RESUME gets
        INVALID_SESSION(false) and discord.py re-IDENTIFYs."""
        self._sessions.clear()

    async def close_gateway(self, code: int = 4000) -> None:
        """Close the current gateway connection from the server side; discord.py reconnects
        and RESUMEs for resumable codes (1000, 1001, 4000, 4009 ...)."""
        session = self._current()
        ws = session.ws
        if ws is None or ws.closed:
            raise RuntimeError(f"no open gateway connection; {self.describe()}")
        session.ws = None
        await ws.close(code=code, message=b"closed by fake")

    async def send_message(
        self,
        channel_id: str,
        author_id: str,
        content: str,
        *,
        mention_bot: bool = False,
        guild: bool = True,
        message_id: str | None = None,
        attachments: Sequence[JSON] = (),
        mentions: Sequence[str] = (),
        mention_roles: Sequence[str] = (),
        dm: bool = False,
    ) -> JSON:
        """A user posts a message: build it (`build_message`), store it, dispatch
        MESSAGE_CREATE, return the payload."""
        payload = self.build_message(
            channel_id,
            author_id,
            content,
            mention_bot=mention_bot,
            guild=guild,
            message_id=message_id,
            attachments=attachments,
            mentions=mentions,
            mention_roles=mention_roles,
            dm=dm,
        )
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    def build_message(
        self,
        channel_id: str,
        author_id: str,
        content: str,
        *,
        mention_bot: bool = False,
        guild: bool = True,
        message_id: str | None = None,
        attachments: Sequence[JSON] = (),
        mentions: Sequence[str] = (),
        mention_roles: Sequence[str] = (),
        dm: bool = False,
    ) -> JSON:
        """Build and store a user's MESSAGE_CREATE payload without dispatching it (e.g. for
        `queue_missed`). `mentions` are user ids; `<@id>` in `content` is parsed too, as
        discord.py does not parse content itself."""
        if dm:
            guild = False
            if channel_id not in self._dms:
                self._open_dm_channel(channel_id, author_id)
        elif self.channel(channel_id) is None:
            raise KeyError(f"unknown channel {channel_id}: call fake.add_channel() first")
        if mention_bot and f"<@{self.bot_id}>" not in content:
            content = f"<@{self.bot_id}> {content}"
        guild_id = self.guild_id if guild else None
        user_ids = [*mentions, *_USER_MENTION.findall(content)]
        for user_id in user_ids:
            self._user(user_id)  # fail loudly on a typo'd mention
        mid = message_id or self._ids.next()
        self._ids.observe(mid)
        msg = payloads.message(
            mid,
            channel_id,
            self._user(author_id),
            content,
            guild_id=guild_id,
            mentions=self._mention_objects(user_ids, guild_id),
            mention_roles=list(dict.fromkeys([*mention_roles, *_ROLE_MENTION.findall(content)])),
            mention_everyone="@everyone" in content,
            attachments=attachments,
            nonce=self._ids.next(),
        )
        self._put_message(channel_id, msg)
        return self._gateway_message(msg)

    def _gateway_message(self, msg: JSON) -> JSON:
        # Gateway MESSAGE_CREATE adds the author's partial member for guild messages (not for
        # webhook/interaction messages, whose author is not a member).
        if (
            "guild_id" not in msg
            or msg.get("webhook_id")
            or msg["author"]["id"] not in self._members
        ):
            return msg
        return {**msg, "member": self._partial_member(msg["author"]["id"])}

    def _put_message(self, channel_id: str, msg: JSON) -> None:
        self.messages.setdefault(channel_id, {})[msg["id"]] = msg
        channel = self.channel(channel_id)
        if channel is None:
            return
        channel["last_message_id"] = msg["id"]
        if channel["type"] in _THREAD_TYPES and msg["id"] != channel_id:
            channel["message_count"] += 1
            channel["total_message_sent"] += 1
            msg["position"] = channel["total_message_sent"]

    def _interaction_invoker(self, user_id: str, guild_id: str | None) -> JSON:
        user_obj = self._user(user_id)
        if guild_id is None:
            return user_obj
        info = self._members.get(user_id, {"nick": None, "roles": [], "joined_at": self._created})
        return payloads.interaction_member(
            user_obj, nick=info["nick"], roles=info["roles"], joined_at=info["joined_at"]
        )

    def _component_message(
        self, channel_id: str, message_id: str, clicked: str | None = None
    ) -> JSON:
        stored = self.messages.get(channel_id, {}).get(message_id)
        if stored is not None:
            return stored
        # A click on a message this fake never saw (e.g. sent before a simulated restart):
        # stand in a bot message with that id, so updates to it have something to apply to.
        # It shows the clicked button, as the message of a real click always does (discord.py
        # rebuilds dynamic items from it).
        self._ids.observe(message_id)
        components = [payloads.action_row([payloads.button(clicked)])] if clicked else []
        msg = payloads.message(
            message_id,
            channel_id,
            self.bot_user,
            "",
            guild_id=self._guild_of(channel_id),
            components=components,
        )
        self._put_message(channel_id, msg)
        return msg

    async def _interact(
        self, type: int, channel_id: str, user_id: str, data: JSON, message_id: str | None
    ) -> JSON:
        channel = self.channel(channel_id)
        if channel is None:
            raise KeyError(f"unknown channel {channel_id}")
        guild_id = self._guild_of(channel_id)
        invoker = self._interaction_invoker(user_id, guild_id)
        clicked = str(data["custom_id"]) if type == 3 else None
        message_obj = (
            self._component_message(channel_id, message_id, clicked) if message_id else None
        )
        inter = _Interaction(
            id=self._ids.next(),
            token=f"aW50ZXJhY3Rpb246{uuid.uuid4().hex}{uuid.uuid4().hex}",
            type=type,
            channel_id=channel_id,
            user_id=user_id,
            message_id=message_id,
            created_at=self.now(),
        )
        payload = payloads.interaction(
            inter.id,
            inter.token,
            type=type,
            app_id=self.app_id,
            data=data,
            channel=dict(channel),
            invoker=invoker,
            guild_id=guild_id,
            message_obj=self._gateway_message(message_obj) if message_obj else None,
        )
        self._interactions[inter.id] = inter
        self._by_token[inter.token] = inter.id
        await self.dispatch("INTERACTION_CREATE", payload)
        return payload

    async def click(self, channel_id: str, message_id: str, custom_id: str, user_id: str) -> JSON:
        """A user clicks a button: INTERACTION_CREATE type 3 (component_type 2); returns the
        payload (with `id` and `token`).

        A message the fake does not know (sent before a simulated restart) is stood in by an
        empty bot message with that id, stored so that updates to it apply.
        """
        data = {"custom_id": custom_id, "component_type": 2}
        return await self._interact(3, channel_id, user_id, data, message_id)

    async def submit_modal(
        self,
        channel_id: str,
        custom_id: str,
        user_id: str,
        values: Mapping[str, str],
        message_id: str | None = None,
    ) -> JSON:
        """A user submits a modal: INTERACTION_CREATE type 5, one action row per text input."""
        rows = [
            {"type": 1, "components": [{"type": 4, "custom_id": key, "value": value}]}
            for key, value in values.items()
        ]
        data = {"custom_id": custom_id, "components": rows}
        return await self._interact(5, channel_id, user_id, data, message_id)

    async def invoke_command(
        self,
        name: str,
        channel_id: str,
        user_id: str,
        *,
        options: Sequence[JSON] = (),
        resolved: JSON | None = None,
    ) -> JSON:
        """A user runs the slash command `/name` in `channel_id`: INTERACTION_CREATE type 2
        (APPLICATION_COMMAND) with `data {id, name, type: 1, options, guild_id}`; returns the
        payload (with `id` and `token`). The command must have been registered (in the
        channel's guild or globally), as Discord offers no other; subcommands are options of
        type 1 (`payloads.subcommand`)."""
        guild_id = self._guild_of(channel_id)
        command = self.commands.find(name, guild_id)
        if command is None:
            raise LookupError(
                f"/{name} is not registered for guild {guild_id} nor globally; registered: "
                f"{[c['name'] for c in self.commands.commands(guild_id)]} (guild), "
                f"{[c['name'] for c in self.commands.global_commands]} (global)"
            )
        data: JSON = {"id": command["id"], "name": name, "type": 1}
        if options:
            data["options"] = list(options)
        if resolved:
            data["resolved"] = resolved
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        return await self._interact(2, channel_id, user_id, data, None)

    # -- clock -------------------------------------------------------------------------------

    def now(self) -> float:
        """The fake's clock: `time.monotonic()` moved on by `advance`."""
        return time.monotonic() + self._clock_offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on (e.g. past an interaction token's 15 minutes)."""
        self._clock_offset += seconds

    # -- inspection: typing, gateway events --------------------------------------------------

    def typing_in(self, channel_id: str) -> list[float]:
        """When (fake clock) the bot triggered the typing indicator in a channel."""
        return [at for channel, at in self.typing if channel == channel_id]

    def attachments_in(self, channel_id: str) -> list[StoredAttachment]:
        """Every file the bot attached to a message (in history) of a channel or thread,
        oldest first, with its bytes."""
        out: list[StoredAttachment] = []
        for msg in self.messages.get(channel_id, {}).values():
            for att in msg.get("attachments") or []:
                blob = self._blobs.get(f"{att['id']}/{att['filename']}")
                if blob is None or msg["author"]["id"] != self.bot_id:
                    continue
                out.append(
                    StoredAttachment(
                        msg["id"], att["filename"], att["size"], att["content_type"], blob.data
                    )
                )
        return out

    def dispatched(self, t: str) -> list[JSON]:
        """The `d` of every event of type `t` sent in the current gateway session."""
        if self._session is None:
            return []
        return [frame["d"] for frame in self._session.events if frame["t"] == t]

    # -- faults ------------------------------------------------------------------------------

    def rate_limit(
        self,
        method: str,
        path_pattern: str,
        *,
        retry_after: float = 0.05,
        times: int = 1,
        global_: bool = False,
    ) -> None:
        """Answer the next `times` matching requests with 429 (`Via` + JSON `retry_after`,
        so discord.py sleeps and retries; it tries 5 times in all, so times >= 5 makes it
        raise HTTPException). Patterns: `/channels/{channel_id}/messages` or `*` segments."""
        headers = {
            "Via": "1.1 google",
            "Retry-After": str(math.ceil(retry_after)),
            "X-RateLimit-Scope": "global" if global_ else "user",
        }
        if global_:
            headers["X-RateLimit-Global"] = "true"
        body = {
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": global_,
        }
        self._faults.append(_Fault(method.upper(), path_pattern, _Reply(429, body, headers), times))

    def fail(
        self,
        method: str,
        path_pattern: str,
        *,
        status: int,
        code: int = 0,
        message: str = "",
        times: int = 1,
    ) -> None:
        """Answer the next `times` matching requests with `status` and Discord's error JSON
        (e.g. 403 code 50001 "Missing Access"). discord.py retries 500/502/504 itself, with
        sleeps of 1 s, 3 s, ..., so prefer 4xx in fast tests."""
        reply = _error(status, message or f"{status}: fake failure", code)
        self._faults.append(_Fault(method.upper(), path_pattern, reply, times))

    def hold(
        self,
        method: str,
        path_pattern: str,
        *,
        served: bool = True,
        when: Callable[[Recorded], bool] | None = None,
    ) -> Hold:
        """Hold matching requests (those `when` accepts, if given) until the returned hold
        is released (see `Hold`)."""
        hold = Hold(method.upper(), path_pattern, served, when)
        self._holds.append(hold)
        return hold

    def _hold_for(self, request: Recorded) -> Hold | None:
        return next((h for h in self._holds if h.matches(request)), None)

    def _fault_for(self, method: str, path: str) -> _Reply | None:
        for fault in self._faults:
            if fault.matches(method, path):
                fault.remaining -= 1
                return fault.reply
        return None

    # -- HTTP plumbing -----------------------------------------------------------------------

    def _route_table(self) -> list[_Route]:
        table: list[tuple[str, str, Handler, bool]] = [
            ("GET", "/users/@me", self._get_me, True),
            ("GET", "/oauth2/applications/@me", self._get_application, True),
            ("GET", "/gateway", self._get_gateway, False),
            ("GET", "/gateway/bot", self._get_gateway_bot, True),
            ("POST", "/users/@me/channels", self._post_dm, True),
            ("GET", "/users/{user_id}", self._get_user, True),
            ("GET", "/guilds/{guild_id}", self._get_guild, True),
            ("GET", "/guilds/{guild_id}/members/{user_id}", self._get_member, True),
            ("GET", "/guilds/{guild_id}/channels", self._get_guild_channels, True),
            ("GET", "/channels/{channel_id}", self._get_channel, True),
            ("GET", "/channels/{channel_id}/messages", self._get_history, True),
            ("POST", "/channels/{channel_id}/messages", self._post_message, True),
            ("GET", "/channels/{channel_id}/messages/{message_id}", self._get_message, True),
            ("PATCH", "/channels/{channel_id}/messages/{message_id}", self._patch_message, True),
            ("DELETE", "/channels/{channel_id}/messages/{message_id}", self._delete_message, True),
            (
                "POST",
                "/channels/{channel_id}/messages/{message_id}/threads",
                self._post_thread_from_message,
                True,
            ),
            ("POST", "/channels/{channel_id}/threads", self._post_thread, True),
            ("PUT", "/channels/{channel_id}/thread-members/@me", self._put_thread_member, True),
            ("POST", "/channels/{channel_id}/typing", self._post_typing, True),
            ("GET", "/applications/{app_id}/commands", self._get_commands, True),
            ("PUT", "/applications/{app_id}/commands", self._put_commands, True),
            ("POST", "/applications/{app_id}/commands", self._post_command, True),
            ("GET", "/applications/{app_id}/guilds/{guild_id}/commands", self._get_commands, True),
            ("PUT", "/applications/{app_id}/guilds/{guild_id}/commands", self._put_commands, True),
            (
                "POST",
                "/applications/{app_id}/guilds/{guild_id}/commands",
                self._post_command,
                True,
            ),
            (
                "POST",
                "/interactions/{interaction_id}/{token*}/callback",
                self._post_callback,
                False,
            ),
            ("POST", "/webhooks/{app_id}/{token*}", self._post_followup, False),
            ("GET", "/webhooks/{app_id}/{token*}/messages/{message_id*}", self._get_wh_msg, False),
            (
                "PATCH",
                "/webhooks/{app_id}/{token*}/messages/{message_id*}",
                self._patch_wh_msg,
                False,
            ),
            (
                "DELETE",
                "/webhooks/{app_id}/{token*}/messages/{message_id*}",
                self._delete_wh_msg,
                False,
            ),
        ]
        return [_Route(m, _compile(t), h, auth) for m, t, h, auth in table]

    async def _read_call(self, request: web.Request, path: str) -> _Call:
        body: Any = None
        files: list[UploadedFile] = []
        if request.content_type == "multipart/form-data":
            body, files = await _read_multipart(request)
        elif request.can_read_body:
            raw = await request.read()
            with contextlib.suppress(ValueError):
                body = json.loads(raw) if raw else None
        return _Call(
            method=request.method,
            path=path,
            query=dict(request.query),
            json=body,
            files=files,
            headers=dict(request.headers),
        )

    async def _api(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        call = await self._read_call(request, path)
        recorded = Recorded(
            call.method, path, call.query, call.json, call.headers, files=call.files
        )
        self.requests.append(recorded)
        hold = self._hold_for(recorded)
        if hold is not None:
            hold.calls.append(recorded)
            if not hold.served:
                await hold.wait()
                if request.transport is not None:
                    request.transport.close()  # dropped: the client never gets an answer
                return web.Response(status=503)
        reply = await self._answer(call)
        recorded.status = reply.status
        if hold is not None:
            await hold.wait()
        return reply.response()

    async def _answer(self, call: _Call) -> _Reply:
        for route in self._routes:
            match = route.regex.match(call.path)
            if route.method != call.method or match is None:
                continue
            if route.auth and not call.headers.get("Authorization", "").startswith("Bot "):
                return _error(401, "401: Unauthorized")
            fault = self._fault_for(call.method, call.path)
            if fault is not None:
                return fault
            return await route.handler(call, match.groupdict())
        self.unknown.append(f"{call.method} {call.path}")
        return _error(404, "Unknown route")

    # -- REST: users, application, gateway, guild --------------------------------------------

    async def _get_me(self, call: _Call, p: dict[str, str]) -> _Reply:
        return _Reply(
            body={**self.bot_user, "verified": True, "mfa_enabled": False, "locale": "en-US"}
        )

    async def _get_application(self, call: _Call, p: dict[str, str]) -> _Reply:
        return _Reply(
            body=payloads.application(self.app_id, self.bot_user, self._owner, name="raven")
        )

    async def _get_gateway(self, call: _Call, p: dict[str, str]) -> _Reply:
        return _Reply(body={"url": self.gateway_url})

    async def _get_gateway_bot(self, call: _Call, p: dict[str, str]) -> _Reply:
        limit = {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}
        return _Reply(body={"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _get_user(self, call: _Call, p: dict[str, str]) -> _Reply:
        user_obj = self._users.get(p["user_id"])
        return _Reply(body=user_obj) if user_obj else _not_found("User", 10013)

    def _guild_object(self) -> JSON:
        return payloads.guild(
            self.guild_id,
            self.guild_name,
            owner_id=self._owner["id"],
            roles=list(self._roles.values()),
            system_channel_id=next(iter(self._channels), None),
        )

    async def _get_guild(self, call: _Call, p: dict[str, str]) -> _Reply:
        if p["guild_id"] != self.guild_id:
            return _not_found("Guild", 10004)
        body = self._guild_object()
        if call.query.get("with_counts") in ("1", "true"):
            body |= {
                "approximate_member_count": len(self._members),
                "approximate_presence_count": 0,
            }
        return _Reply(body=body)

    async def _get_member(self, call: _Call, p: dict[str, str]) -> _Reply:
        if p["guild_id"] != self.guild_id:
            return _not_found("Guild", 10004)
        if p["user_id"] not in self._members:
            return _not_found("Member", 10007)
        return _Reply(body=self._full_member(p["user_id"]))

    async def _get_guild_channels(self, call: _Call, p: dict[str, str]) -> _Reply:
        if p["guild_id"] != self.guild_id:
            return _not_found("Guild", 10004)
        return _Reply(body=list(self._channels.values()))

    async def _get_channel(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel = self.channel(p["channel_id"])
        return _Reply(body=channel) if channel else _not_found("Channel", 10003)

    async def _post_dm(self, call: _Call, p: dict[str, str]) -> _Reply:
        recipient = str(call.body.get("recipient_id", ""))
        if recipient not in self._users:
            return _error(400, "Invalid Recipient(s)", 50033)
        return _Reply(body=self.dm_channel_for(recipient))

    # -- REST: messages ----------------------------------------------------------------------

    async def _get_history(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel_id = p["channel_id"]
        if self.channel(channel_id) is None:
            return _not_found("Channel", 10003)
        ordered = sorted(self.messages.get(channel_id, {}).values(), key=lambda m: int(m["id"]))
        limit = max(1, min(100, int(call.query.get("limit", "50"))))
        return _Reply(body=_history_page(ordered, call.query, limit))

    async def _get_message(self, call: _Call, p: dict[str, str]) -> _Reply:
        if self.channel(p["channel_id"]) is None:
            return _not_found("Channel", 10003)
        msg = self.messages.get(p["channel_id"], {}).get(p["message_id"])
        return _Reply(body=msg) if msg else _not_found("Message", 10008)

    async def _post_message(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel_id = p["channel_id"]
        if self.channel(channel_id) is None:
            return _not_found("Channel", 10003)
        problem = _message_problem(call.body, call.files) or self._upload_problem(call.files)
        if problem is not None:
            return problem
        duplicate = self._nonce_duplicate(channel_id, call.body)
        if duplicate is not None:
            return _Reply(body=duplicate)
        msg = self._bot_message(channel_id, call.body, call.files)
        self._remember_nonce(channel_id, call.body, msg["id"])
        self._put_message(channel_id, msg)
        await self._echo("MESSAGE_CREATE", self._gateway_message(msg))
        return _Reply(body=msg)

    def _upload_problem(self, files: Sequence[UploadedFile]) -> _Reply | None:
        """Discord refuses a request whose files exceed the upload limit with 413/40005."""
        if sum(len(f.data) for f in files) > self.max_upload_bytes:
            return _error(413, "Request entity too large", 40005)
        return None

    def _nonce_duplicate(self, channel_id: str, body: JSON) -> JSON | None:
        nonce = body.get("nonce")
        if nonce is None or not body.get("enforce_nonce"):
            return None
        seen = self._nonces.get((channel_id, str(nonce)))
        if seen is None or time.monotonic() - seen[1] > NONCE_WINDOW_S:
            return None
        return self.messages.get(channel_id, {}).get(seen[0])

    def _remember_nonce(self, channel_id: str, body: JSON, message_id: str) -> None:
        if body.get("nonce") is not None:
            self._nonces[(channel_id, str(body["nonce"]))] = (message_id, time.monotonic())

    def _bot_message(
        self,
        channel_id: str,
        body: JSON,
        files: Sequence[UploadedFile],
        *,
        extra: Mapping[str, Any] | None = None,
        flags: int | None = None,
    ) -> JSON:
        guild_id = self._guild_of(channel_id)
        content = str(body.get("content") or "")
        user_ids, role_ids, everyone = _allowed_mentions(content, body.get("allowed_mentions"))
        more: JSON = dict(extra or {})
        msg_type = self._reference_fields(channel_id, body, more)
        if body.get("allowed_mentions") is not None:
            more["allowed_mentions"] = body["allowed_mentions"]
        mid = self._ids.next()
        return payloads.message(
            mid,
            channel_id,
            self.bot_user,
            content,
            guild_id=guild_id,
            type=msg_type,
            mentions=self._mention_objects(user_ids, guild_id),
            mention_roles=[r for r in role_ids if r in self._roles],
            mention_everyone=everyone,
            attachments=self._uploads(body, files),
            embeds=[{"type": "rich", **e} for e in body.get("embeds") or []],
            components=list(body.get("components") or []),
            flags=int(body.get("flags") or 0) if flags is None else flags,
            nonce=body.get("nonce"),
            tts=bool(body.get("tts")),
            extra=more,
        )

    def _reference_fields(self, channel_id: str, body: JSON, out: JSON) -> int:
        """Fill `message_reference` / `referenced_message` for a reply; returns the type."""
        ref = body.get("message_reference")
        if not ref:
            return 0
        ref_channel = str(ref.get("channel_id") or channel_id)
        out["message_reference"] = {
            "type": 0,
            "message_id": str(ref.get("message_id")),
            "channel_id": ref_channel,
            **({"guild_id": self.guild_id} if self._guild_of(ref_channel) else {}),
        }
        referenced = self.messages.get(ref_channel, {}).get(str(ref.get("message_id")))
        # Discord nests one level only: the referenced message carries no reference of its own.
        out["referenced_message"] = (
            {k: v for k, v in referenced.items() if k != "referenced_message"}
            if referenced is not None
            else None
        )
        return 19

    def _uploads(self, body: JSON, files: Sequence[UploadedFile]) -> list[JSON]:
        """Attachment objects for uploaded files; their bytes are served for download."""
        described = {
            str(a.get("id")): a for a in body.get("attachments") or [] if isinstance(a, dict)
        }
        out: list[JSON] = []
        for index, upload in enumerate(files):
            meta = described.get(str(index), {})
            attachment_id = self._ids.next()
            filename = str(meta.get("filename") or upload.filename)
            name = f"{attachment_id}/{filename}"
            # discord.py labels every part application/octet-stream; Discord sniffs the
            # type from the name (and content), e.g. image/png.
            content_type = upload.content_type
            if content_type == "application/octet-stream":
                content_type = mimetypes.guess_type(filename)[0] or content_type
            self._blobs[name] = _Blob(upload.data, content_type)
            out.append(
                payloads.attachment(
                    attachment_id,
                    filename,
                    size=len(upload.data),
                    url=self._attachment_url(name),
                    content_type=content_type,
                    description=meta.get("description"),
                )
            )
        return out

    def _apply_edit(self, msg: JSON, body: JSON, files: Sequence[UploadedFile]) -> None:
        """Apply a message edit body (REST PATCH, webhook PATCH, callback type 7)."""
        # A null clears a field: content to "", components to [].
        for key, cleared in (("content", ""), ("components", []), ("allowed_mentions", None)):
            if key in body:
                msg[key] = body[key] if body[key] is not None else cleared
        if "embeds" in body:
            msg["embeds"] = [{"type": "rich", **e} for e in body["embeds"] or []]
        if "attachments" in body or files:
            keep = {str(a.get("id")) for a in body.get("attachments") or [] if isinstance(a, dict)}
            kept = [a for a in msg["attachments"] if a["id"] in keep]
            msg["attachments"] = kept + self._uploads(body, files)
        if "flags" in body and body["flags"] is not None:
            # Only SUPPRESS_EMBEDS can be changed by an edit.
            msg["flags"] = (msg["flags"] & ~SUPPRESS_EMBEDS) | (
                int(body["flags"]) & SUPPRESS_EMBEDS
            )
        if "content" in body:
            guild_id = msg.get("guild_id")
            user_ids, role_ids, everyone = _allowed_mentions(
                str(msg["content"] or ""), msg.get("allowed_mentions")
            )
            msg["mentions"] = self._mention_objects(user_ids, guild_id)
            msg["mention_roles"] = [r for r in role_ids if r in self._roles]
            msg["mention_everyone"] = everyone

    async def _patch_message(self, call: _Call, p: dict[str, str]) -> _Reply:
        msg = self.messages.get(p["channel_id"], {}).get(p["message_id"])
        if msg is None:
            return _not_found("Message", 10008)
        if msg["author"]["id"] != self.bot_id:
            return _error(403, "Cannot edit a message authored by another user", 50005)
        if len(str(call.body.get("content") or "")) > MAX_CONTENT:
            return _too_long()
        self._apply_edit(msg, call.body, call.files)
        msg["edited_timestamp"] = payloads.timestamp()
        await self._echo("MESSAGE_UPDATE", self._gateway_message(msg))
        return _Reply(body=msg)

    async def _delete_message(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel_id = p["channel_id"]
        msg = self.messages.get(channel_id, {}).pop(p["message_id"], None)
        if msg is None:
            return _not_found("Message", 10008)
        await self._echo("MESSAGE_DELETE", self._delete_event(channel_id, msg["id"]))
        return _Reply(204)

    def _delete_event(self, channel_id: str, message_id: str) -> JSON:
        event: JSON = {"id": message_id, "channel_id": channel_id}
        if self._guild_of(channel_id):
            event["guild_id"] = self.guild_id
        return event

    async def _echo(self, t: str, d: JSON) -> None:
        if self.echo_bot_messages and self._session is not None:
            await self.dispatch(t, d)

    # -- REST: threads, typing ---------------------------------------------------------------

    async def _post_thread_from_message(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel_id, message_id = p["channel_id"], p["message_id"]
        parent = self._channels.get(channel_id)
        if parent is None:
            return _not_found("Channel", 10003)
        starter = self.messages.get(channel_id, {}).get(message_id)
        if starter is None:
            return _not_found("Message", 10008)
        if message_id in self.threads:
            return _error(400, "A thread has already been created for this message", 160004)
        thread = self._new_thread(message_id, channel_id, call.body, default_type=11)
        # The starter message now links to its thread (HAS_THREAD).
        starter["thread"] = thread
        starter["flags"] |= 1 << 5
        await self._echo("THREAD_CREATE", {**thread, "newly_created": True})
        return _Reply(201, thread)

    async def _post_thread(self, call: _Call, p: dict[str, str]) -> _Reply:
        channel_id = p["channel_id"]
        if channel_id not in self._channels:
            return _not_found("Channel", 10003)
        if not call.body.get("name"):
            return _invalid_form("name", "BASE_TYPE_REQUIRED", "This field is required")
        # Discord defaults to a private thread when the type is omitted.
        thread = self._new_thread(self._ids.next(), channel_id, call.body, default_type=12)
        await self._echo("THREAD_CREATE", {**thread, "newly_created": True})
        return _Reply(201, thread)

    def _new_thread(self, thread_id: str, parent_id: str, body: JSON, *, default_type: int) -> JSON:
        thread = payloads.thread(
            thread_id,
            str(body.get("name") or "thread"),
            guild_id=self.guild_id,
            parent_id=parent_id,
            owner_id=self.bot_id,
            type=int(body.get("type") or default_type),
            auto_archive_duration=int(body.get("auto_archive_duration") or 1440),
            rate_limit_per_user=int(body.get("rate_limit_per_user") or 0),
            invitable=bool(body.get("invitable", True)),
        )
        self.threads[thread_id] = thread
        return thread

    async def _put_thread_member(self, call: _Call, p: dict[str, str]) -> _Reply:
        thread = self.threads.get(p["channel_id"])
        if thread is None:
            return _not_found("Channel", 10003)
        return _Reply(204)

    async def _post_typing(self, call: _Call, p: dict[str, str]) -> _Reply:
        if self.channel(p["channel_id"]) is None:
            return _not_found("Channel", 10003)
        self.typing.append((p["channel_id"], self.now()))
        return _Reply(204)

    # -- REST: application commands ----------------------------------------------------------

    def _commands_scope(self, p: dict[str, str]) -> tuple[str | None, _Reply | None]:
        """The guild (None: global) a commands route is for, or Discord's error."""
        if p["app_id"] != self.app_id:
            return None, _error(403, "Missing Access", 50001)
        guild_id = p.get("guild_id")
        if guild_id is not None and guild_id != self.guild_id:
            return None, _error(403, "Missing Access", 50001)
        return guild_id, None

    async def _get_commands(self, call: _Call, p: dict[str, str]) -> _Reply:
        guild_id, problem = self._commands_scope(p)
        return problem or _Reply(body=self.commands.commands(guild_id))

    async def _put_commands(self, call: _Call, p: dict[str, str]) -> _Reply:
        guild_id, problem = self._commands_scope(p)
        if problem is not None:
            return problem
        payload = call.json if isinstance(call.json, list) else None
        if payload is None:
            return _invalid_form("_root", "LIST_TYPE_CONVERT", "Must be a list.")
        if len(payload) > 100:
            return _invalid_form("_root", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer.")
        for index, command in enumerate(payload):
            found = command_problem(index, command)
            if found is not None:
                return _invalid_form(*found)
        return _Reply(body=self.commands.overwrite(guild_id, payload))

    async def _post_command(self, call: _Call, p: dict[str, str]) -> _Reply:
        guild_id, problem = self._commands_scope(p)
        if problem is not None:
            return problem
        found = command_problem(0, call.json)
        if found is not None:
            return _invalid_form(*found)
        command, created = self.commands.upsert(guild_id, call.body)
        return _Reply(201 if created else 200, command)

    # -- REST: interactions and webhooks -----------------------------------------------------

    async def _post_callback(self, call: _Call, p: dict[str, str]) -> _Reply:
        inter = self._interactions.get(p["interaction_id"])
        if inter is None or inter.token != p["token"] or self._callback_late(inter):
            return _not_found("interaction", 10062)
        if inter.callback_type is not None:
            return _error(400, "Interaction has already been acknowledged.", 40060)
        cb_type: Any = call.body.get("type")
        data: JSON = call.body.get("data") or {}
        problem = self._callback_problem(inter, cb_type, data, call.files)
        if problem is not None:
            return problem
        cb_type = int(cb_type)
        self.interaction_callbacks.append(
            {"id": inter.id, "token": inter.token, "type": cb_type, "data": data}
        )
        inter.callback_type = cb_type
        msg = await self._apply_callback(inter, cb_type, data, call.files)
        if call.query.get("with_response") not in ("1", "true", "True"):
            return _Reply(204)
        return _Reply(body=_callback_body(inter, cb_type, msg))

    def _callback_problem(
        self, inter: _Interaction, cb_type: Any, data: JSON, files: Sequence[UploadedFile]
    ) -> _Reply | None:
        """Discord's checks on an interaction response, before anything is applied."""
        if cb_type not in (4, 5, 6, 7, 9):
            return _invalid_form(
                "type", "BASE_TYPE_CHOICES", "Value must be one of (4, 5, 6, 7, 9)."
            )
        if cb_type in (6, 7):
            return self._update_problem(inter, data)
        if cb_type == 9:
            return _modal_problem(inter, data)
        if cb_type == 4:
            return _message_problem(data, files)
        return None

    def _update_problem(self, inter: _Interaction, data: JSON) -> _Reply | None:
        if inter.message_id is None:
            return _error(400, "Interaction has no message to update", 50035)
        if self.messages.get(inter.channel_id, {}).get(inter.message_id) is None:
            return _not_found("Message", 10008)
        if len(str(data.get("content") or "")) > MAX_CONTENT:
            return _too_long()
        return None

    async def _apply_callback(
        self, inter: _Interaction, cb_type: int, data: JSON, files: Sequence[UploadedFile]
    ) -> JSON | None:
        if cb_type in (4, 5):
            flags = int(data.get("flags") or 0)
            if cb_type == 5:
                # The "thinking" placeholder: empty, LOADING, ephemeral if the defer was.
                data, flags = {}, LOADING | (flags & EPHEMERAL)
            msg = await self._interaction_message(inter, data, files, flags=flags)
            inter.response_id = msg["id"]
            inter.loading = cb_type == 5
            return msg
        if cb_type == 7:
            target = self.messages[inter.channel_id][inter.message_id or ""]
            self._apply_edit(target, data, files)
            target["edited_timestamp"] = payloads.timestamp()
            await self._echo("MESSAGE_UPDATE", self._gateway_message(target))
            return target
        return None  # 6: deferred update, 9: modal (nothing visible yet)

    async def _interaction_message(
        self, inter: _Interaction, body: JSON, files: Sequence[UploadedFile], *, flags: int
    ) -> JSON:
        """A message created through an interaction (response or follow-up)."""
        metadata: JSON = {
            "id": inter.id,
            "type": inter.type,
            "user": self._user(inter.user_id),
            "authorizing_integration_owners": {"0": self._guild_of(inter.channel_id) or "0"},
        }
        extra: JSON = {
            "webhook_id": self.app_id,
            "application_id": self.app_id,
            "interaction_metadata": metadata,
        }
        if inter.message_id is not None:
            metadata["interacted_message_id"] = inter.message_id
        msg = self._bot_message(inter.channel_id, body, files, extra=extra, flags=flags)
        if flags & EPHEMERAL:
            # Ephemeral messages are visible to the clicking user only: not in history.
            self._ephemeral[msg["id"]] = msg
        else:
            self._put_message(inter.channel_id, msg)
            await self._echo("MESSAGE_CREATE", msg)
        return msg

    def _webhook_interaction(self, p: dict[str, str]) -> _Interaction | _Reply:
        """The interaction behind a webhook token, or Discord's error for the token."""
        inter_id = self._by_token.get(p["token"])
        if p["app_id"] != self.app_id or inter_id is None:
            return _not_found("Webhook", 10015)
        inter = self._interactions[inter_id]
        if self.now() - inter.created_at >= self.interaction_ttl_s:
            return _error(401, "Invalid Webhook Token", 50027)
        # Follow-ups and @original need an initial response first.
        if inter.callback_type is None:
            return _not_found("Webhook", 10015)
        return inter

    def _callback_late(self, inter: _Interaction) -> bool:
        """Whether the initial response comes after the token died (or, with a callback
        window set, after that window): Discord then no longer knows the interaction."""
        age = self.now() - inter.created_at
        window = self.callback_window_s
        return age >= self.interaction_ttl_s or (window is not None and age > window)

    def _find_interaction_message(self, inter: _Interaction, message_id: str) -> JSON | None:
        if message_id == "@original":
            if inter.callback_type in (4, 5):
                message_id = inter.response_id or ""
            elif inter.callback_type in (6, 7):
                message_id = inter.message_id or ""
            else:
                return None
        elif message_id not in (*inter.followup_ids, inter.response_id):
            return None
        return self._ephemeral.get(message_id) or self.messages.get(inter.channel_id, {}).get(
            message_id
        )

    async def _post_followup(self, call: _Call, p: dict[str, str]) -> _Reply:
        inter = self._webhook_interaction(p)
        if isinstance(inter, _Reply):
            return inter
        problem = _message_problem(call.body, call.files) or self._upload_problem(call.files)
        if problem is not None:
            return problem
        if inter.loading:
            # The first follow-up after a "thinking" defer completes the placeholder, keeping
            # the defer's ephemerality (Discord ignores the follow-up's own flags here).
            msg = self._find_interaction_message(inter, "@original")
            assert msg is not None
            await self._complete_loading(inter, msg, call.body, call.files)
        else:
            flags = int(call.body.get("flags") or 0) & (EPHEMERAL | SUPPRESS_EMBEDS)
            msg = await self._interaction_message(inter, call.body, call.files, flags=flags)
            inter.followup_ids.append(msg["id"])
        self._record_followup("send", inter, msg, call.body)
        if call.query.get("wait") not in ("1", "true", "True"):
            return _Reply(204)
        return _Reply(body=msg)

    async def _complete_loading(
        self, inter: _Interaction, msg: JSON, body: JSON, files: Sequence[UploadedFile]
    ) -> None:
        self._apply_edit(msg, body, files)
        msg["flags"] &= ~LOADING
        inter.loading = False
        if not msg["flags"] & EPHEMERAL:
            await self._echo("MESSAGE_UPDATE", msg)

    def _record_followup(self, action: str, inter: _Interaction, msg: JSON, body: Any) -> None:
        self.followups.append(
            {
                "action": action,
                "interaction_id": inter.id,
                "token": inter.token,
                "message_id": msg["id"],
                "original": msg["id"] in (inter.response_id, inter.message_id),
                "payload": body,
                "message": msg,
            }
        )

    async def _get_wh_msg(self, call: _Call, p: dict[str, str]) -> _Reply:
        inter = self._webhook_interaction(p)
        if isinstance(inter, _Reply):
            return inter
        msg = self._find_interaction_message(inter, p["message_id"])
        return _Reply(body=msg) if msg else _not_found("Message", 10008)

    async def _patch_wh_msg(self, call: _Call, p: dict[str, str]) -> _Reply:
        inter = self._webhook_interaction(p)
        if isinstance(inter, _Reply):
            return inter
        msg = self._find_interaction_message(inter, p["message_id"])
        if msg is None:
            return _not_found("Message", 10008)
        if len(str(call.body.get("content") or "")) > MAX_CONTENT:
            return _too_long()
        if inter.loading and msg["id"] == inter.response_id:
            await self._complete_loading(inter, msg, call.body, call.files)
        else:
            self._apply_edit(msg, call.body, call.files)
            msg["edited_timestamp"] = payloads.timestamp()
            if not msg["flags"] & EPHEMERAL:
                await self._echo("MESSAGE_UPDATE", self._gateway_message(msg))
        self._record_followup("edit", inter, msg, call.body)
        return _Reply(body=msg)

    async def _delete_wh_msg(self, call: _Call, p: dict[str, str]) -> _Reply:
        inter = self._webhook_interaction(p)
        if isinstance(inter, _Reply):
            return inter
        msg = self._find_interaction_message(inter, p["message_id"])
        if msg is None:
            return _not_found("Message", 10008)
        self._record_followup("delete", inter, msg, None)
        if self._ephemeral.pop(msg["id"], None) is None:
            self.messages.get(inter.channel_id, {}).pop(msg["id"], None)
            await self._echo("MESSAGE_DELETE", self._delete_event(inter.channel_id, msg["id"]))
        return _Reply(204)

    # -- attachments -------------------------------------------------------------------------

    async def _attachment(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        blob = self._blobs.get(name)
        self.downloads.append(name)
        if blob is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=blob.data, headers={"Content-Type": blob.content_type})

    # -- gateway -----------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        # discord.py appends ?v=10&encoding=json&compress=...; text frames are accepted under
        # any compression, so the query is ignored.
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        self.gateway_paths.append(request.path)
        self._sockets.append(ws)
        try:
            hello = {
                "heartbeat_interval": self.heartbeat_interval_ms,
                "_trace": ['["gateway-prd-fake"]'],
            }
            await ws.send_str(json.dumps({"op": 10, "d": hello, "s": None, "t": None}))
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_frame(ws, json.loads(msg.data))
        finally:
            self._sockets.remove(ws)
            for session in self._sessions.values():
                if session.ws is ws:
                    session.ws = None
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: JSON) -> None:
        self.gateway_received.append(frame)
        op = frame.get("op")
        if op == 1:
            await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
        elif op == 2:
            await self._identify(ws, frame.get("d") or {})
        elif op == 6:
            await self._resume(ws, frame.get("d") or {})
        # Other ops (presence 3, voice 4, request members 8) are recorded and ignored.

    async def _identify(self, ws: web.WebSocketResponse, d: JSON) -> None:
        self.identifies += 1
        session = _Session(uuid.uuid4().hex, str(d.get("token", "")), int(d.get("intents") or 0))
        self._sessions[session.session_id] = session
        self._session = session
        ready = payloads.ready(
            self.bot_user,
            guild_ids=[self.guild_id],
            session_id=session.session_id,
            resume_gateway_url=self.resume_gateway_url,
            app_id=self.app_id,
            shard=d.get("shard"),
        )
        self._store(session, "READY", ready)
        self._store(session, "GUILD_CREATE", self._guild_create())
        await self._catch_up(session, ws, after=0)
        session.ready = True

    def _guild_create(self) -> JSON:
        return payloads.guild_create(
            self._guild_object(),
            channels=list(self._channels.values()),
            members=[self._full_member(uid) for uid in self._members],
            joined_at=self._created,
        )

    async def _resume(self, ws: web.WebSocketResponse, d: JSON) -> None:
        session = self._sessions.get(str(d.get("session_id")))
        if session is None or session.token != d.get("token"):
            await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))
            return
        self.resumes += 1
        self._session = session
        await self._catch_up(session, ws, after=int(d.get("seq") or 0), replay=True)
        session.seq += 1
        resumed = {
            "op": 0,
            "t": "RESUMED",
            "s": session.seq,
            "d": {"_trace": ['["gateway-prd-fake"]']},
        }
        await self._send(session, ws, resumed)

    async def _catch_up(
        self, session: _Session, ws: web.WebSocketResponse, *, after: int, replay: bool = False
    ) -> None:
        """Send stored events with s > `after`, then attach `ws` to the session.

        Events dispatched while this runs are stored but not sent (the socket is not attached
        yet), so loop until nothing is left; attaching right after the last check (no await in
        between) means nothing is lost or sent out of order.
        """
        sent = after
        while pending := [f for f in session.events if f["s"] > sent]:
            for frame in pending:
                if not (replay and frame["t"] == "READY"):
                    await self._send(session, ws, frame)
                sent = frame["s"]
        session.ws = ws

    async def _send(self, session: _Session, ws: web.WebSocketResponse, frame: JSON) -> None:
        # A socket closing under us: the event stays stored and a RESUME replays it.
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_str(json.dumps(self._visible(session, frame)))

    def _visible(self, session: _Session, frame: JSON) -> JSON:
        """The frame as this session may see it: without the message-content intent, guild
        messages that neither mention the bot nor come from it lose content, embeds,
        attachments, components and polls (as Discord does)."""
        if session.intents & MESSAGE_CONTENT_INTENT or frame["t"] not in (
            "MESSAGE_CREATE",
            "MESSAGE_UPDATE",
        ):
            return frame
        d = frame["d"]
        mentioned = any(u.get("id") == self.bot_id for u in d.get("mentions", []))
        if not d.get("guild_id") or mentioned or d.get("author", {}).get("id") == self.bot_id:
            return frame
        blank = {**d, "content": "", "embeds": [], "attachments": [], "components": []}
        blank.pop("poll", None)
        return {**frame, "d": blank}


# -- helpers ---------------------------------------------------------------------------------


async def _read_multipart(request: web.Request) -> tuple[Any, list[UploadedFile]]:
    """discord.py's uploads: a `payload_json` part plus `files[n]` parts."""
    body: Any = None
    files: list[UploadedFile] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        data = await part.read(decode=True)
        if part.name == "payload_json":
            with contextlib.suppress(ValueError):
                body = json.loads(data)
        elif part.filename is not None:
            ctype = part.headers.get("Content-Type", "application/octet-stream")
            files.append(UploadedFile(part.name or "", part.filename, ctype, bytes(data)))
    return body, files


def _history_page(ordered: list[JSON], query: Mapping[str, str], limit: int) -> list[JSON]:
    """A page of `GET /channels/{id}/messages`: always newest first, like Discord."""
    if "before" in query:
        before = int(query["before"])
        page = [m for m in ordered if int(m["id"]) < before][-limit:]
    elif "after" in query:
        after = int(query["after"])
        page = [m for m in ordered if int(m["id"]) > after][:limit]
    elif "around" in query:
        around = int(query["around"])
        index = next((i for i, m in enumerate(ordered) if int(m["id"]) >= around), len(ordered))
        start = max(0, index - limit // 2)
        page = ordered[start : start + limit]
    else:
        page = ordered[-limit:]
    return list(reversed(page))


def _too_long() -> _Reply:
    return _invalid_form(
        "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
    )


def _modal_problem(inter: _Interaction, data: JSON) -> _Reply | None:
    if inter.type == 5:
        return _error(400, "A modal cannot be sent in response to a modal submit", 50035)
    if not (data.get("custom_id") and data.get("title") and data.get("components")):
        return _invalid_form(
            "data", "BASE_TYPE_REQUIRED", "custom_id, title and components are required"
        )
    return None


def _message_problem(body: JSON, files: Sequence[UploadedFile]) -> _Reply | None:
    """Discord's validation of a new message: not empty, content at most 2000 characters."""
    if not files and not any(body.get(key) for key in _MESSAGE_KEYS):
        return _error(400, "Cannot send an empty message", 50006)
    if len(str(body.get("content") or "")) > MAX_CONTENT:
        return _too_long()
    return None


def _allowed_mentions(content: str, allowed: Any) -> tuple[list[str], list[str], bool]:
    """Which `<@id>`, `<@&id>` and @everyone/@here in `content` really mention, given the
    message's `allowed_mentions` (absent: everything parses, as Discord does)."""
    users = _USER_MENTION.findall(content)
    roles = _ROLE_MENTION.findall(content)
    everyone = "@everyone" in content or "@here" in content
    if not isinstance(allowed, dict):
        return users, roles, everyone
    parse = set(allowed.get("parse") or [])
    allowed_users = {str(u) for u in allowed.get("users") or []}
    allowed_roles = {str(r) for r in allowed.get("roles") or []}
    return (
        [u for u in users if "users" in parse or u in allowed_users],
        [r for r in roles if "roles" in parse or r in allowed_roles],
        everyone and "everyone" in parse,
    )


def _callback_body(inter: _Interaction, cb_type: int, msg: JSON | None) -> JSON:
    """The `?with_response=1` answer: `{"interaction": {...}, "resource": {...}}`."""
    info: JSON = {"id": inter.id, "type": inter.type}
    if msg is not None and cb_type in (4, 5):
        info |= {
            "response_message_id": msg["id"],
            "response_message_loading": cb_type == 5,
            "response_message_ephemeral": bool(msg["flags"] & EPHEMERAL),
        }
    body: JSON = {"interaction": info}
    if msg is not None:
        body["resource"] = {"type": cb_type, "message": msg}
    return body


def _describe_predicate(predicate: Callable[[], bool]) -> str:
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return getattr(predicate, "__qualname__", repr(predicate))
