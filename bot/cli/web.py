"""`raven-bot web`: the read-only viewer served alone, beside a bot or without one, and
`raven-bot web link RUN|CAMPAIGN`: a signed link for the operator.

Reads RAVEN_HOME/raven.db like every one-shot command (it writes nothing but the schema's
upgrades); the link key is RAVEN_HOME/web.key, the one the bot signs its links with.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from contextlib import AsyncExitStack
from typing import TextIO
from zoneinfo import ZoneInfo

from bot.cli.database import open_database
from bot.home import HomeError, check_home
from bot.settings import Settings
from bot.web.links import WebLinks
from bot.web.serving import WebSection, start_viewer
from bot.web.tokens import LinkKey
from host.graph.run_store import RunStore
from oncall.store import CampaignStore

_NOT_SET = (
    "the web viewer is not set up: set RAVEN_WEB_PORT (the port it listens on) and, behind a "
    "reverse proxy, RAVEN_WEB_PUBLIC_URL (the base of its links)"
)


def web_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry for `raven-bot web [--port N]` and `raven-bot web link ID`."""
    try:
        check_home(settings.home)
        section = settings.section(WebSection)
        if args.web_command == "link":
            return asyncio.run(_link(settings, section, args.record, sys.stdout))
        return asyncio.run(_serve(settings, section, args.port, sys.stdout))
    except KeyboardInterrupt:
        return 130
    except HomeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 1


async def _serve(settings: Settings, section: WebSection, port: int | None, out: TextIO) -> int:
    if port is None and not section.enabled:
        print(f"raven-bot: {_NOT_SET}, or pass --port", file=sys.stderr)
        return 2
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    async with open_database(settings.home) as store, AsyncExitStack() as stack:
        where = await start_viewer(
            store, settings.home, section, ZoneInfo(settings.timezone), stack, port=port
        )
        out.write(
            f"Serving the read-only viewer on {where} until Ctrl-C. It opens only signed "
            "links: `raven-bot web link RUN|CAMPAIGN` prints one.\n"
        )
        out.flush()
        await stopped.wait()
    return 0


async def _link(settings: Settings, section: WebSection, record: str, out: TextIO) -> int:
    if not section.enabled and not section.web_public_url:
        print(f"raven-bot: {_NOT_SET}", file=sys.stderr)
        return 2
    links = WebLinks(
        await asyncio.to_thread(LinkKey.load, settings.home),
        section.link_base,
        section.web_link_hours,
    )
    async with open_database(settings.home) as store:
        run = await RunStore(store).run(record)
        campaign = None if run is not None else await CampaignStore(store).get(record)
    if run is not None:
        url = links.run(run.conversation, run.id)
    elif campaign is not None:
        url = links.campaign(campaign.conversation, campaign.id)
    else:
        print(
            f"raven-bot: no run or campaign `{record}`; `raven-bot runs list` and "
            "`raven-bot campaigns list` show the recorded ones",
            file=sys.stderr,
        )
        return 2
    hours = section.web_link_hours
    out.write(f"{url}\n")
    print(
        f"(opens this record's conversation's runs, campaigns and schedules for "
        f"{hours:g} h; anyone holding it can read them)",
        file=sys.stderr,
    )
    return 0
