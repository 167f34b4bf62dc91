"""The viewer as the bot serves it (RAVEN_WEB_PORT) and as `raven-bot web` serves it alone,
and the links both make: one place that turns the settings into a server and into links."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from aiohttp import web

from bot.web.links import WebLinks, base_url
from bot.web.tokens import LinkKey
from core.store import Store

log = logging.getLogger(__name__)

# Open live pages end this soon at shutdown (their streams never end on their own).
_SHUTDOWN_SECONDS = 1.0


@dataclass(frozen=True)
class WebSection:
    """The viewer's settings as the bot reads them (`Settings.section`)."""

    web_port: int | None
    web_host: str
    web_public_url: str
    web_link_hours: float

    @property
    def enabled(self) -> bool:
        return self.web_port is not None

    @property
    def link_base(self) -> str:
        """Where the links it posts point (`links.base_url`)."""
        return base_url(self.web_public_url, self.web_host, self.web_port)


def web_links(home: Path, section: WebSection) -> WebLinks | None:
    """The links the bot posts: None when the viewer is off (RAVEN_WEB_PORT unset). Blocking:
    the signing key is read, or made, in RAVEN_HOME."""
    if not section.enabled:
        return None
    return WebLinks(LinkKey.load(home), section.link_base, section.web_link_hours)


async def start_viewer(
    store: Store,
    home: Path,
    section: WebSection,
    zone: ZoneInfo,
    stack: AsyncExitStack,
    *,
    port: int | None = None,
) -> str:
    """Serve the viewer until `stack` closes; where it listens. A RuntimeError naming the
    setting when the address cannot be listened on."""
    # The error names what the operator set: `raven-bot web --port N` or RAVEN_WEB_PORT.
    setting = "RAVEN_WEB_PORT=" if port is None else "--port "
    port = port if port is not None else section.web_port
    if port is None:
        raise RuntimeError("the web viewer needs a port: set RAVEN_WEB_PORT (or pass --port)")
    # Imported when served: its pages need networkx and Jinja2, which a start without the
    # viewer never loads.
    from bot.web.server import Viewer, ViewerConfig

    viewer = Viewer(store, LinkKey.load(home), ViewerConfig(home=home, zone=zone))
    runner = web.AppRunner(
        viewer.app(), access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_SECONDS
    )
    await runner.setup()
    site = web.TCPSite(runner, section.web_host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise RuntimeError(
            f"{setting}{port}: cannot listen on {section.web_host}:{port} "
            f"({exc.strerror or exc}); choose a free port, or stop what uses it"
        ) from None
    stack.push_async_callback(runner.cleanup)
    shown = section.web_host if ":" not in section.web_host else f"[{section.web_host}]"
    where = f"http://{shown}:{port}"
    log.info("web viewer listening on %s (links open at %s)", where, section.link_base)
    return where
