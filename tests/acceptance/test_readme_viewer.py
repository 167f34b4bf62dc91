"""The README's web viewer, through the real `raven-bot`: the bot run as the README shows it
(`RAVEN_WEB_PORT=… .venv/bin/raven-bot run`) serving Slack (Socket Mode) against the loopback
fake, no model key. In a channel thread a person runs a one-node plan; the `🔎 Open run …`
link in the thread opens the run's page (its graph, the node's output, the strict CSP), and
`status`'s link the conversation's overview. An altered link gets 403; another thread's link
does not open this thread's run (404). `raven-bot web link RUN` prints a link that opens the
run beside the serving bot, and `raven-bot web --port N` serves the same records alone until
SIGTERM. A one-round campaign in the same thread: its `🔎 Open campaign …` link and `raven-bot
web link CAMPAIGN` open its chart. The bot's log holds no link token.

Substituted: the README's port 8787 becomes a free port of this machine (two viewers run at
once here, and another suite may hold 8787), and `run_0123456789` the id of the run the
thread made. `raven-bot web --port N` is typed after `exec`, so that SIGTERM reaches the
viewer itself rather than `sh`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest
import pytest_asyncio

from tests.acceptance.harness import WITHIN, Result, project_dir, sh, slack_env
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

SERVE_WITH_BOT = "RAVEN_WEB_PORT=8787 .venv/bin/raven-bot run"
LINK_FOR_OPERATOR = "RAVEN_WEB_PORT=8787 .venv/bin/raven-bot web link run_0123456789"
SERVE_ALONE = "raven-bot web --port 8787"

README_EXAMPLES = [
    SERVE_WITH_BOT,
    LINK_FOR_OPERATOR,
    SERVE_ALONE,
    "raven-bot web link RUN",
    # The commands table's lines for the same two commands.
    "raven-bot web [--port N]",
    "raven-bot web link RUN\\|CAMPAIGN",
]

CHANNEL = "C0VIEWER"
ALICE = "U0AL1CE42"
PLAN = 's1: shell: echo "hello from the viewer"'
OUTPUT = "hello from the viewer"
# Slack mrkdwn links, as the adapter writes the bot's `🔎 [label](url)` lines.
RUN_LINK = re.compile(r"🔎 <(?P<url>https?://[^|>]+)\|Open run (?P<run>run_[0-9a-f]+)>")
# The run's graph, drawn: an SVG with one completed node.
GRAPH = re.compile(
    r'<svg\b[^>]*\bclass="graph".*<g class="node state-completed">.*</svg>', re.DOTALL
)
CAMPAIGN_LINK = re.compile(
    r"🔎 <(?P<url>https?://[^|>]+)\|Open campaign (?P<campaign>cmp_[0-9a-f]+)>"
)
# One round on the bot's own host whose metric the page charts.
ONE_ROUND = (
    "campaign: one round | machine: local | run: echo 'loss 7' | metric: loss min | "
    "budget: 1h | rounds: 1 | baseline: 10 | poll: 1s"
)
CHART = re.compile(r'<svg\b[^>]*\bclass="chart"')
OVERVIEW_LINK = re.compile(
    r"🔎 <(?P<url>https?://[^|>]+)\|Open this conversation's runs, campaigns and schedules>"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _with_port(command: str, port: int) -> str:
    """A README command line with its port 8787 made `port`."""
    assert command.count("8787") == 1, command
    return command.replace("8787", str(port))


def _buttons(post: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = post.get("blocks") or []
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


@dataclass
class Viewed:
    """The serving bot, the Slack fake it talks to, and where its viewer listens."""

    slack: FakeSlack
    home: Path
    project: Path
    env: dict[str, str]
    port: int
    log: Path

    async def mention(self, text: str) -> str:
        """Alice mentions the bot in the channel: a new thread; its ts."""
        ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, ALICE, f"<@UBOT> {text}", ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))
        return ts

    async def say(self, thread: str, text: str) -> None:
        """Alice writes in the thread without a mention."""
        event = payloads.thread_message(CHANNEL, ALICE, text, self.slack.next_ts(), thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def posts(self, thread: str) -> list[dict[str, Any]]:
        """What the bot posted in the thread, each as it was last edited."""
        edits = {
            call.args.get("ts"): call.args for call in self.slack.calls_to("chat.update") if call.ok
        }
        found = []
        for call in self.slack.calls_to("chat.postMessage"):
            if call.ok and call.args.get("thread_ts") == thread:
                ts = call.response.get("ts")
                found.append({**call.args, **edits.get(ts, {}), "ts": ts})
        return found

    async def post_after(
        self, thread: str, seen: int, cond: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """The first post in the thread after its first `seen` that satisfies `cond`."""

        def found() -> list[dict[str, Any]]:
            return [p for p in self.posts(thread)[seen:] if cond(p)]

        try:
            await eventually(found, within=WITHIN)
        except AssertionError:
            shown = "\n---\n".join(str(p.get("text")) for p in self.posts(thread))
            raise AssertionError(f"the thread never got it; it has:\n{shown}") from None
        return found()[0]

    async def click(self, thread: str, post: dict[str, Any], label: str) -> None:
        button = next(b for b in _buttons(post) if b["text"]["text"] == label)
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            ALICE,
            CHANNEL,
            post["ts"],
            thread_ts=thread,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)

    async def shell(self, command: str) -> Result:
        """A README command line typed in the project directory, beside the bot."""
        return await asyncio.to_thread(sh, command, env=self.env, cwd=self.project)


@contextlib.asynccontextmanager
async def _typed(command: str, env: dict[str, str], cwd: Path, log: Path) -> AsyncIterator[Any]:
    """`command` typed in `sh` (as the README writes it) in `cwd`, output to `log`; its
    whole process group killed after."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), WITHIN)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def viewed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Viewed]:
    root = tmp_path_factory.mktemp("readme-viewer")
    home = root / "raven-home"
    home.mkdir()
    project = project_dir(root / "project")
    port = _free_port()
    async with FakeSlack() as slack:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(home, slack.api_url)
        log = root / "raven-bot.log"
        async with _typed(_with_port(SERVE_WITH_BOT, port), env, project, log):
            await slack.wait_connected(within=WITHIN)
            yield Viewed(slack, home, project, env, port, log)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WITHIN)) as session:
        yield session


@dataclass(frozen=True)
class Page:
    """What a browser got for a URL."""

    status: int
    text: str
    headers: dict[str, str]


async def _get(http: aiohttp.ClientSession, url: str) -> Page:
    async with http.get(url, allow_redirects=False) as response:
        return Page(response.status, await response.text(), dict(response.headers))


def _altered(url: str) -> str:
    """`url` with one character of its token's signature changed (not the last: its low
    bits may be base64 padding)."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    at = segments.index("v") + 1
    version, payload, signature = segments[at].split(".")
    middle = len(signature) // 2
    swapped = "A" if signature[middle] != "A" else "B"
    segments[at] = ".".join(
        [version, payload, signature[:middle] + swapped + signature[middle + 1 :]]
    )
    return urlunsplit(parts._replace(path="/".join(segments)))


def _token_of(url: str) -> str:
    segments = urlsplit(url).path.split("/")
    return segments[segments.index("v") + 1]


def _run_page_shows(page: Page, run_id: str) -> None:
    assert page.status == 200, page.text[:500]
    assert run_id in page.text
    assert GRAPH.search(page.text), page.text
    # The node's output as rendered (the task as sent also holds the words, quoted).
    assert f"<p>{OUTPUT}</p>" in page.text, page.text
    csp = page.headers.get("Content-Security-Policy", "")
    assert "default-src" in csp and "'unsafe-inline'" not in csp, csp


@dataclass(frozen=True)
class Ran:
    """The thread's run and the links the thread got for it."""

    thread: str
    run_id: str
    run_link: str
    overview_link: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ran(viewed: Viewed) -> Ran:
    """Alice runs the one-node plan in a thread and approves its command by the button."""
    thread = await viewed.mention(PLAN)
    prompt = await viewed.post_after(thread, 0, lambda p: bool(_buttons(p)))
    await viewed.click(thread, prompt, "Approve")
    # The report (its status message also names the node's command and "completed").
    report = await viewed.post_after(thread, 0, lambda p: "*Output of `s1`*" in str(p.get("text")))
    found = RUN_LINK.search(str(report.get("text")))
    assert found is not None, report.get("text")
    seen = len(viewed.posts(thread))
    await viewed.say(thread, "status")
    status = await viewed.post_after(
        thread, seen, lambda p: bool(OVERVIEW_LINK.search(str(p.get("text"))))
    )
    overview = OVERVIEW_LINK.search(str(status.get("text")))
    assert overview is not None
    return Ran(thread, found["run"], found["url"], overview["url"])


async def test_a_run_link_posted_in_the_thread_opens_the_run(
    viewed: Viewed, ran: Ran, http: aiohttp.ClientSession
) -> None:
    assert urlsplit(ran.run_link).netloc == f"127.0.0.1:{viewed.port}"
    # The run's reply, its status message and its report each end with its link.
    texts = [str(p.get("text")) for p in viewed.posts(ran.thread)]
    for kind in ("Started run", f"*Run `{ran.run_id}`* —", f"*Run `{ran.run_id}` completed*"):
        (text,) = [t for t in texts if kind in t] or [f"no post with {kind!r}: {texts}"]
        assert text.endswith(f"|Open run {ran.run_id}>"), text
        found = RUN_LINK.search(text)
        assert found is not None and found["url"].endswith(f"/run/{ran.run_id}"), text
    _run_page_shows(await _get(http, ran.run_link), ran.run_id)

    overview = await _get(http, ran.overview_link)
    assert overview.status == 200, overview.text[:500]
    assert ran.run_id in overview.text

    altered = await _get(http, _altered(ran.run_link))
    assert altered.status == 403
    assert ran.run_id not in altered.text and OUTPUT not in altered.text


async def test_another_threads_link_does_not_open_this_threads_run(
    viewed: Viewed, ran: Ran, http: aiohttp.ClientSession
) -> None:
    other = await viewed.mention("status")
    status = await viewed.post_after(
        other, 0, lambda p: bool(OVERVIEW_LINK.search(str(p.get("text"))))
    )
    found = OVERVIEW_LINK.search(str(status.get("text")))
    assert found is not None
    other_link = found["url"]
    assert _token_of(other_link) != _token_of(ran.overview_link)

    overview = await _get(http, other_link)
    assert overview.status == 200, overview.text[:500]
    assert ran.run_id not in overview.text

    base = other_link.rstrip("/")
    foreign = await _get(http, f"{base}/run/{ran.run_id}")
    assert foreign.status == 404
    assert OUTPUT not in foreign.text


async def test_web_link_prints_a_link_that_opens_the_run(
    viewed: Viewed, ran: Ran, http: aiohttp.ClientSession
) -> None:
    command = _with_port(LINK_FOR_OPERATOR, viewed.port).replace("run_0123456789", ran.run_id)
    result = await viewed.shell(command)
    assert result.code == 0, result.both
    (url,) = result.out.split()
    assert url.startswith(f"http://127.0.0.1:{viewed.port}/v/"), url
    _run_page_shows(await _get(http, url), ran.run_id)


async def test_web_alone_serves_the_same_records_until_sigterm(
    viewed: Viewed, ran: Ran, http: aiohttp.ClientSession
) -> None:
    printed = await viewed.shell(
        _with_port(LINK_FOR_OPERATOR, viewed.port).replace("run_0123456789", ran.run_id)
    )
    assert printed.code == 0, printed.both
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"exec {_with_port(SERVE_ALONE, port)}",
        cwd=viewed.project,
        env=viewed.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), WITHIN)
        assert first.decode().startswith(
            f"Serving the read-only viewer on http://127.0.0.1:{port}"
        ), first
        root = await _get(http, f"http://127.0.0.1:{port}/")
        assert root.status == 403
        moved = urlunsplit(urlsplit(printed.out.strip())._replace(netloc=f"127.0.0.1:{port}"))
        _run_page_shows(await _get(http, moved), ran.run_id)

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), WITHIN) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), WITHIN)


@dataclass(frozen=True)
class Campaigned:
    """The thread's campaign and the link its report ended with."""

    campaign_id: str
    link: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def campaigned(viewed: Viewed, ran: Ran) -> Campaigned:
    """Alice starts a one-round campaign in the same thread and approves it by the button."""
    seen = len(viewed.posts(ran.thread))
    await viewed.say(ran.thread, ONE_ROUND)
    prompt = await viewed.post_after(ran.thread, seen, lambda p: bool(_buttons(p)))
    await viewed.click(ran.thread, prompt, "Approve")
    report = await viewed.post_after(ran.thread, seen, lambda p: "report:" in str(p.get("text")))
    found = CAMPAIGN_LINK.search(str(report.get("text")))
    assert found is not None, report.get("text")
    return Campaigned(found["campaign"], found["url"])


async def test_a_campaign_link_and_web_link_open_the_campaign(
    viewed: Viewed, campaigned: Campaigned, http: aiohttp.ClientSession
) -> None:
    page = await _get(http, campaigned.link)
    assert page.status == 200, page.text[:500]
    assert campaigned.campaign_id in page.text
    assert CHART.search(page.text), page.text

    # Without RAVEN_WEB_PORT (or a public URL) there is no address to link to: it says so.
    unset = await viewed.shell(f"raven-bot web link {campaigned.campaign_id}")
    assert unset.code == 2 and "set RAVEN_WEB_PORT" in unset.err, unset.both
    assert unset.out == ""
    printed = await viewed.shell(
        f"RAVEN_WEB_PORT={viewed.port} raven-bot web link {campaigned.campaign_id}"
    )
    assert printed.code == 0, printed.both
    again = await _get(http, printed.out.strip())
    assert again.status == 200, again.text[:500]
    assert CHART.search(again.text) and campaigned.campaign_id in again.text, again.text


async def test_the_status_link_opens_the_conversations_schedules(
    ran: Ran, http: aiohttp.ClientSession
) -> None:
    page = await _get(http, f"{ran.overview_link.rstrip('/')}/schedules")
    assert page.status == 200, page.text[:500]


async def test_the_status_link_lists_the_conversations_campaigns(
    ran: Ran, campaigned: Campaigned, http: aiohttp.ClientSession
) -> None:
    overview = await _get(http, ran.overview_link)
    assert ran.run_id in overview.text
    assert campaigned.campaign_id in overview.text


async def test_the_bot_log_holds_no_link_and_no_traceback(
    viewed: Viewed, ran: Ran, campaigned: Campaigned
) -> None:
    log = viewed.log.read_text(encoding="utf-8", errors="replace")
    for link in (ran.run_link, ran.overview_link, campaigned.link):
        assert _token_of(link) not in log
    assert "Traceback" not in log, log[-3000:]
