"""The viewer's HTTP server (aiohttp): read-only pages behind signed, expiring links.

Every page is under `/v/<token>/…`; the token names one conversation, and a page shows a
record only when it belongs to that conversation (a DM's records never open from a
channel's link). No token, an expired or an altered one: 403 and nothing else. Unknown or
other conversations' ids: 404, the same page for both, so a link cannot probe for ids.
Every response carries a strict Content-Security-Policy (scripts and styles from this
server only, nothing inline), no referrer and no caching. Bad input gets a plain error page
and one log line with the token left out; never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Final
from zoneinfo import ZoneInfo

from aiohttp import web
from markupsafe import Markup

from bot.web.campaign_view import campaign_signature, load_campaign
from bot.web.chart_svg import campaign_chart_svgs
from bot.web.graph_svg import graph_svg
from bot.web.pages import Pages
from bot.web.run_view import RECORD_ID, RunView, load_run, run_signature
from bot.web.schedule_view import load_schedules
from bot.web.tokens import Grant, LinkKey, TokenRefused
from core.ids import ConversationRef
from core.store import Store
from host.features.schedules.store import TaskStore
from host.graph.records import RunFiles
from host.graph.run_store import RunStore
from oncall.store import CampaignStore

log = logging.getLogger(__name__)

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
MAX_PATH_CHARS: Final = 2048
MAX_WATCHERS: Final = 64  # live pages open at once (each polls the store once a second)
_STATIC: Final = {"viewer.css": "text/css", "viewer.js": "text/javascript"}
_LONGEST_LOGGED: Final = 64  # characters of a path segment (a record id) logged as it is

Clock = Callable[[], float]
Signature = Callable[[], Awaitable[tuple[object, ...] | None]]


@dataclass
class ViewerConfig:
    """How the viewer reads and shows records."""

    home: Path
    zone: ZoneInfo
    clock: Clock = time.time
    # Seconds between looks at a watched record (a live page), and between keep-alives.
    poll_seconds: float = 1.0
    keepalive_seconds: float = 15.0


class Viewer:
    """The read-only viewer over the bot's store."""

    def __init__(self, store: Store, key: LinkKey, config: ViewerConfig) -> None:
        self._key = key
        self._config = config
        self._runs = RunStore(store)
        self._campaigns = CampaignStore(store)
        self._tasks = TaskStore(store)
        self._files = RunFiles(config.home / "runs")
        self._pages = Pages(config.zone)
        # The script and the style sheet, read once (a page asks for both every time).
        self._static_files = {
            name: files("bot.web").joinpath("static", name).read_bytes() for name in _STATIC
        }
        self._watching = 0

    def app(self) -> web.Application:
        """The aiohttp application (GET and HEAD only; no request body is read)."""
        app = web.Application(
            middlewares=[self._guard],
            client_max_size=1024,
            handler_args={"logger": _UnreadRequests(log, {})},
        )
        app.router.add_get("/", self._no_link)
        app.router.add_get("/v/", self._no_link)
        app.router.add_get("/static/{name}", self._static)
        # Browsers ask for it on every page: no icon, and no log line each time.
        app.router.add_get("/favicon.ico", _no_icon)
        app.router.add_get("/v/{token}/", self._conversation)
        app.router.add_get("/v/{token}/run/{run_id}", self._run)
        app.router.add_get("/v/{token}/run/{run_id}/events", self._run_events)
        app.router.add_get("/v/{token}/run/{run_id}/node/{index}", self._node)
        app.router.add_get("/v/{token}/campaign/{campaign_id}", self._campaign)
        app.router.add_get("/v/{token}/campaign/{campaign_id}/events", self._campaign_events)
        app.router.add_get("/v/{token}/schedules", self._schedules)
        return app

    # ------------------------------------------------------------------ guard and errors

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            if request.method not in ("GET", "HEAD"):
                raise _Refusal(405, "Not allowed", "This viewer only shows pages.", "method")
            if len(request.raw_path) > MAX_PATH_CHARS:
                raise _Refusal(414, "Address too long", "This is not a viewer link.", "long path")
            response = await handler(request)
        except _Refusal as refusal:
            log.warning(
                "web viewer: %s %s refused (%s): %s",
                request.method,
                _redacted(request.path),
                refusal.status,
                refusal.why,
            )
            response = self._error(request, refusal.status, refusal.heading, refusal.detail)
        except web.HTTPException as exc:
            if exc.status >= 400:
                log.warning(
                    "web viewer: %s %s: %s", request.method, _redacted(request.path), exc.status
                )
                response = self._error(request, exc.status, exc.reason, _detail(exc.status))
            else:
                raise
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("web viewer: %s %s failed", request.method, _redacted(request.path))
            response = self._error(
                request, 500, "Something went wrong", "The page could not be shown."
            )
        if not response.prepared:
            response.headers.update(_HEADERS)
        return response

    def _error(self, request: web.Request, status: int, heading: str, detail: str) -> web.Response:
        text = self._pages.render(
            "error.html",
            title=heading,
            status=status,
            heading=heading,
            detail=detail,
            root=_root(request.path),
            home=None,
            schedules=None,
            live=None,
        )
        return web.Response(status=status, text=text, content_type="text/html", charset="utf-8")

    def _grant(self, request: web.Request) -> Grant:
        try:
            return self._key.verify(request.match_info["token"], now=self._config.clock())
        except TokenRefused as refused:
            raise _Refusal(403, _NO_LINK, _NO_LINK_DETAIL, f"token {refused.reason}") from None

    # ------------------------------------------------------------------ pages

    async def _no_link(self, request: web.Request) -> web.StreamResponse:
        raise _Refusal(403, _NO_LINK, _NO_LINK_DETAIL, "no token")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        kind = _STATIC.get(name)
        if kind is None:
            raise _Refusal(404, "Not found", "There is no such file.", "static")
        return web.Response(body=self._static_files[name], content_type=kind, charset="utf-8")

    async def _conversation(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        conv = ConversationRef.parse(grant.conversation_id)
        return await self._page(
            request,
            "conversation.html",
            title="This conversation",
            runs=await self._runs.runs(conv.id, limit=100),
            campaigns=(await self._campaigns.of_conversation(conv.id))[:100],
            tasks=await self._tasks.of_conversation(conv.id),
            live=None,
        )

    async def _run(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        run_id = _record_id(request, "run_id")
        view = await self._run_view(grant, run_id)
        # Drawn off the event loop: a big graph must not hold up the bot's own work.
        svg = await asyncio.to_thread(graph_svg, view.picture, view.hrefs)
        return await self._page(
            request,
            "run.html",
            title=f"Run {run_id}",
            view=view,
            # Built by ElementTree from data, every label escaped.
            svg=Markup(svg),
            live=None if view.finished else f"{run_id}/events",
        )

    async def _node(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        run_id = _record_id(request, "run_id")
        view = await self._run_view(grant, run_id)
        index = request.match_info["index"]
        if not index.isdigit() or int(index) >= len(view.nodes):
            raise _Refusal(404, "No such node here", "The run has no such node.", "bad node")
        node = view.nodes[int(index)]
        return await self._page(
            request,
            "node.html",
            title=f"{node.record.node_id} of run {run_id}",
            view=view,
            node=node,
            back=f"../../{run_id}",
            live=None if view.finished else "../events",
        )

    async def _run_view(self, grant: Grant, run_id: str) -> RunView:
        view = await load_run(self._runs, self._files, run_id)
        if view is None or view.run.conversation.id != grant.conversation_id:
            raise _not_here("run", run_id)
        return view

    async def _run_events(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        run_id = _record_id(request, "run_id")
        run = await self._runs.run(run_id)
        if run is None or run.conversation.id != grant.conversation_id:
            raise _not_here("run", run_id)

        async def signature() -> tuple[object, ...] | None:
            return await run_signature(self._runs, run_id)

        async def finished() -> bool:
            now = await self._runs.run(run_id)
            return now is None or now.finished_at is not None

        return await self._follow(request, grant, signature, finished)

    async def _campaign(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        campaign_id = _record_id(request, "campaign_id")
        view = await load_campaign(self._campaigns, campaign_id)
        if view is None or view.record.conversation.id != grant.conversation_id:
            raise _not_here("campaign", campaign_id)
        return await self._page(
            request,
            "campaign.html",
            title=f"Campaign {campaign_id}",
            view=view,
            # Built by ElementTree from data, every label escaped.
            charts=[Markup(svg) for svg in campaign_chart_svgs(view)],
            live=None if view.finished else f"{campaign_id}/events",
        )

    async def _campaign_events(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        campaign_id = _record_id(request, "campaign_id")
        record = await self._campaigns.get(campaign_id)
        if record is None or record.conversation.id != grant.conversation_id:
            raise _not_here("campaign", campaign_id)

        async def signature() -> tuple[object, ...] | None:
            return await campaign_signature(self._campaigns, campaign_id)

        async def finished() -> bool:
            now = await self._campaigns.get(campaign_id)
            return now is None or now.closed_at is not None

        return await self._follow(request, grant, signature, finished)

    async def _schedules(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        conv = ConversationRef.parse(grant.conversation_id)
        view = await load_schedules(self._tasks, self._runs, conv, now=self._config.clock())
        return await self._page(
            request, "schedules.html", title="Scheduled work", view=view, live=None
        )

    async def _page(self, request: web.Request, template: str, **values: object) -> web.Response:
        token = request.match_info["token"]
        root = _root(request.path)
        # Rendered off the event loop: a page of many outputs takes a while to render.
        text = await asyncio.to_thread(
            self._pages.render,
            template,
            root=root,
            home=f"{root}v/{token}/",
            schedules=f"{root}v/{token}/schedules",
            **values,
        )
        return web.Response(text=text, content_type="text/html", charset="utf-8")

    # ------------------------------------------------------------------ live pages

    async def _follow(
        self,
        request: web.Request,
        grant: Grant,
        signature: Signature,
        finished: Callable[[], Awaitable[bool]],
    ) -> web.StreamResponse:
        """Server-sent events: `changed` whenever the record's signature changes, `finished`
        once it ended (then the stream closes). Looked at only while someone watches."""
        if self._watching >= MAX_WATCHERS:
            raise _Refusal(503, "Too many live pages", "Reload the page in a minute.", "watchers")
        self._watching += 1
        try:
            response = web.StreamResponse(headers={**_HEADERS, "Content-Type": "text/event-stream"})
            await response.prepare(request)
            async with _stream(response) as send:
                last = await signature()
                quiet = 0.0
                while self._config.clock() < grant.expires_at:
                    await asyncio.sleep(self._config.poll_seconds)
                    if _gone(request):
                        break  # the reader left: stop looking now, not at the next write
                    now = await signature()
                    if now != last:
                        last, quiet = now, 0.0
                        await send("changed")
                    elif (
                        quiet := quiet + self._config.poll_seconds
                    ) >= self._config.keepalive_seconds:
                        quiet = 0.0
                        await send(None)
                    if await finished():
                        await send("finished")
                        break
            return response
        finally:
            self._watching -= 1


_NO_LINK: Final = "This link does not open anything"
_NO_LINK_DETAIL: Final = (
    "It is expired, altered or not a viewer link. Ask for a new one in the conversation: "
    "`status` there posts one."
)


class _Refusal(Exception):
    """A request answered with an error page: what the reader sees, and why (logged)."""

    def __init__(self, status: int, heading: str, detail: str, why: str) -> None:
        super().__init__(why)
        self.status, self.heading, self.detail, self.why = status, heading, detail, why


class _UnreadRequests(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's own log of requests it answers before the viewer sees them (a request line
    or header over 8 KiB, not HTTP at all): one line saying so, never the request's text (it
    may hold a link's token) nor a traceback, and no louder than a warning."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        kind = type(error).__name__ if isinstance(error, BaseException) else "no exception"
        with contextlib.suppress(TypeError, ValueError):
            msg = str(msg) % args
        self.logger.log(min(level, logging.WARNING), "web viewer: %s (%s)", msg, kind)


@asynccontextmanager
async def _stream(
    response: web.StreamResponse,
) -> AsyncIterator[Callable[[str | None], Awaitable[None]]]:
    async def send(event: str | None) -> None:
        # A comment line keeps proxies from closing an idle stream.
        chunk = f"event: {event}\ndata: {event}\n\n" if event else ": keep-alive\n\n"
        await response.write(chunk.encode())

    with contextlib.suppress(ConnectionResetError):  # the reader went away
        yield send


def _gone(request: web.Request) -> bool:
    """Whether the reader closed the connection (aiohttp does not cancel the handler)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _no_icon(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204)


def _not_here(kind: str, record_id: str) -> _Refusal:
    return _Refusal(
        404,
        f"No such {kind} here",
        f"This conversation has no {kind} with that id.",
        f"{kind} {record_id[:64]!r} not in the link's conversation",
    )


def _record_id(request: web.Request, name: str) -> str:
    value = request.match_info[name]
    if not RECORD_ID.match(value):
        raise _Refusal(404, "Not found", "That is not a record id.", f"bad {name}")
    return value


def _root(path: str) -> str:
    """The relative way from a page back to the viewer's root (links keep working behind a
    reverse proxy that serves the viewer under a path of its own)."""
    return "../" * max(path.count("/") - 1, 0) or "./"


def _redacted(path: str) -> str:
    """A request path as logged: the token left out (it opens records until it expires),
    wherever a mistyped address put it (`//v/…`, `/V/…`): the segment after any `v`, and any
    segment too long to be a record id."""
    segments = path.split("/")
    return "/".join(
        "…" if s and (len(s) > _LONGEST_LOGGED or before.lower() == "v") else s
        for before, s in zip(["", *segments], segments, strict=False)
    )[:200]


def _detail(status: int) -> str:
    if status == 404:
        return "There is no such page. Open a link posted in the conversation."
    if status == 405:
        return "This viewer only shows pages."
    return "The request could not be answered."
