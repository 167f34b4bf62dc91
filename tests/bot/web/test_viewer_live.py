"""A live run page's event stream, served by the real server on 127.0.0.1: a node's change
sends `changed`, the run's end sends `finished` and closes the stream, and when the reader
leaves the viewer stops looking at the store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from bot.web.server import MAX_WATCHERS
from core.store import Store
from host.graph.run_store import RunStore
from tests.bot.web.seed import CHANNEL, DM, SeedNode, seed_run, serving, serving_viewer, token
from tests.helpers import eventually

WAIT = 10.0  # seconds; generous for a loaded machine, never slept


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


async def _unfinished(store: Store, home: Path) -> None:
    await seed_run(
        store,
        home,
        CHANNEL,
        [SeedNode("a", state="running", output=None), SeedNode("b", state="pending", deps=("a",))],
        state="running",
        finished=False,
    )


async def _next_event(response: aiohttp.ClientResponse) -> str:
    """The stream's next event: its name, `keep-alive` for a comment, "" at the end."""
    lines: list[str] = []
    async with asyncio.timeout(WAIT):
        while True:
            raw = await response.content.readline()
            if not raw:
                return ""
            line = raw.decode().rstrip("\r\n")
            if line:
                lines.append(line)
            elif lines:
                break
    if lines[0].startswith(":"):
        return "keep-alive"
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert len(names) == 1, lines
    return names[0]


async def _until(response: aiohttp.ClientResponse, name: str) -> list[str]:
    """Events read up to and including `name` (keep-alives left out)."""
    seen: list[str] = []
    while True:
        event = await _next_event(response)
        assert event != "", f"the stream ended before {name!r}: {seen}"
        if event != "keep-alive":
            seen.append(event)
        if event == name:
            return seen


async def _settle_node(store: Store, node_id: str, state: str) -> None:
    runs = RunStore(store)
    node = next(n for n in await runs.nodes_of_run("r1") if n.node_id == node_id)
    await runs.commit_nodes([node.with_fields(state=state, attempts=node.attempts + 1)])


async def test_a_change_sends_changed_and_the_end_sends_finished(store: Store, home: Path) -> None:
    await _unfinished(store, home)
    url = f"/v/{token(home, CHANNEL)}/run/r1/events"
    async with (
        serving_viewer(store, home, poll_seconds=0.05, keepalive_seconds=0.05) as (base, viewer),
        aiohttp.ClientSession() as client,
        client.get(base + url) as response,
    ):
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        # A keep-alive is sent only after the stream took the run's first look.
        assert await _next_event(response) == "keep-alive"
        assert viewer._watching == 1

        await _settle_node(store, "a", "completed")
        assert await _until(response, "changed") == ["changed"]

        await _settle_node(store, "b", "running")
        assert await _until(response, "changed") == ["changed"]

        await _settle_node(store, "b", "completed")
        await RunStore(store).set_run_state("r1", "completed", finished=True)
        assert (await _until(response, "finished"))[-1] == "finished"
        assert await _next_event(response) == ""
    await eventually(lambda: viewer._watching == 0)


async def test_a_finished_run_ends_its_stream_at_once(store: Store, home: Path) -> None:
    await seed_run(store, home, CHANNEL, [SeedNode("a")])
    async with (
        serving(store, home, poll_seconds=0.05, keepalive_seconds=60) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/run/r1/events") as response,
    ):
        assert await _until(response, "finished") == ["finished"]
        assert await _next_event(response) == ""


async def test_a_reader_leaving_stops_the_looking(store: Store, home: Path) -> None:
    """Keep-alives are far apart here: the stream notices the reader left without one."""
    await _unfinished(store, home)
    url = f"/v/{token(home, CHANNEL)}/run/r1/events"
    async with serving_viewer(store, home, poll_seconds=0.05, keepalive_seconds=3600) as (
        base,
        viewer,
    ):
        async with aiohttp.ClientSession() as client:
            response = await client.get(base + url)
            assert response.status == 200
            assert viewer._watching == 1
            response.close()
        await eventually(lambda: viewer._watching == 0)
        # And a change after the reader left is seen by nobody (the run goes on).
        await _settle_node(store, "a", "completed")
        assert viewer._watching == 0


@pytest.mark.parametrize("case", ["expired", "dm link", "unknown run"])
async def test_a_stream_opens_only_for_a_valid_link_of_the_run(
    store: Store, home: Path, case: str
) -> None:
    await _unfinished(store, home)
    link, expected = {
        "expired": (token(home, CHANNEL, expires_in=-1), 403),
        "dm link": (token(home, DM), 404),
        "unknown run": (token(home, CHANNEL), 404),
    }[case]
    run_id = "r-nowhere" if case == "unknown run" else "r1"
    async with (
        serving_viewer(store, home, poll_seconds=0.05) as (base, viewer),
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{link}/run/{run_id}/events") as response,
    ):
        assert response.status == expected
        assert response.content_type == "text/html"
        assert viewer._watching == 0


async def test_only_an_unfinished_run_page_asks_for_live_updates(store: Store, home: Path) -> None:
    await _unfinished(store, home)
    await seed_run(store, home, CHANNEL, [SeedNode("z")], run_id="r2")
    link = token(home, CHANNEL)
    pages: dict[str, str] = {}
    async with serving(store, home) as base, aiohttp.ClientSession() as client:
        for run_id in ("r1", "r2"):
            async with client.get(f"{base}/v/{link}/run/{run_id}") as response:
                pages[run_id] = await response.text()
    assert 'data-live="r1/events"' in pages["r1"]
    assert "data-live" not in pages["r2"]


async def test_a_stream_ends_when_its_link_expires(store: Store, home: Path) -> None:
    """A live page does not outlive its link: the stream closes without `finished`."""
    await _unfinished(store, home)
    now = [time.time()]
    url = f"/v/{token(home, CHANNEL, expires_in=600)}/run/r1/events"
    async with (
        serving_viewer(
            store, home, poll_seconds=0.05, keepalive_seconds=0.05, clock=lambda: now[0]
        ) as (base, viewer),
        aiohttp.ClientSession() as client,
        client.get(base + url) as response,
    ):
        assert await _next_event(response) == "keep-alive"
        now[0] += 601
        while (event := await _next_event(response)) == "keep-alive":
            pass
        assert event == ""
    await eventually(lambda: viewer._watching == 0)


async def test_live_pages_beyond_the_limit_are_refused_until_one_closes(
    store: Store, home: Path
) -> None:
    await _unfinished(store, home)
    url = f"/v/{token(home, CHANNEL)}/run/r1/events"
    async with (
        serving_viewer(store, home, poll_seconds=1.0, keepalive_seconds=3600) as (base, viewer),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client,
    ):
        streams = [await client.get(base + url) for _ in range(MAX_WATCHERS)]
        try:
            assert {s.status for s in streams} == {200}
            assert viewer._watching == MAX_WATCHERS
            async with client.get(base + url) as refused:
                assert refused.status == 503
                assert refused.content_type == "text/html"
                assert "Too many live pages" in await refused.text()
            assert viewer._watching == MAX_WATCHERS
            streams.pop().close()
            await eventually(lambda: viewer._watching == MAX_WATCHERS - 1)
            streams.append(await client.get(base + url))
            assert streams[-1].status == 200
        finally:
            for stream in streams:
                stream.close()
    await eventually(lambda: viewer._watching == 0)
