"""Who a viewer link lets see what, served by the real server on 127.0.0.1: no link, an
expired or altered one shows nothing of the records (403); a link of another thread or of
a DM does not open this run (404); and bad requests get a plain error page and one log line
that leaves the token out, never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from bot.web.server import CSP
from core.ids import ConversationRef
from core.store import Store
from tests.bot.web.seed import CHANNEL, DM, OTHER_THREAD, SeedNode, seed_run, serving, token
from tests.bot.web.seed_campaign import SeedRound, campaign_spec, seed_campaign

SECRET_SUMMARY = "summary-only-the-thread-may-see"
SECRET_OUTPUT = "output-only-the-thread-may-see"
DM_SUMMARY = "dm-summary-private"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


async def _seed(store: Store, home: Path) -> None:
    await seed_run(
        store,
        home,
        CHANNEL,
        [SeedNode("a", output=SECRET_OUTPUT)],
        run_id="r-channel",
        summary=SECRET_SUMMARY,
    )
    await seed_run(
        store, home, DM, [SeedNode("d", output="dm output")], run_id="r-dm", summary=DM_SUMMARY
    )


async def _get(base: str, path: str, method: str = "GET") -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, base + path, allow_redirects=False) as response,
    ):
        return response.status, response.content_type, await response.text()


def _shows_nothing(body: str) -> None:
    for secret in (SECRET_SUMMARY, SECRET_OUTPUT, DM_SUMMARY, "r-channel", "r-dm"):
        assert secret not in body


async def test_a_valid_link_shows_its_run(store: Store, home: Path) -> None:
    await _seed(store, home)
    async with serving(store, home) as base:
        status, kind, body = await _get(base, f"/v/{token(home, CHANNEL)}/run/r-channel")
    assert (status, kind) == (200, "text/html")
    assert SECRET_SUMMARY in body and SECRET_OUTPUT in body


@pytest.mark.parametrize("path", ["/", "/v/"])
async def test_no_link_gets_403_and_nothing_of_the_records(
    store: Store, home: Path, path: str
) -> None:
    await _seed(store, home)
    async with serving(store, home) as base:
        status, kind, body = await _get(base, path)
    assert (status, kind) == (403, "text/html")
    _shows_nothing(body)


async def test_an_expired_link_gets_403_and_nothing_of_the_run(store: Store, home: Path) -> None:
    await _seed(store, home)
    expired = token(home, CHANNEL, expires_in=-1)
    async with serving(store, home) as base:
        for path in (f"/v/{expired}/run/r-channel", f"/v/{expired}/"):
            status, kind, body = await _get(base, path)
            assert (status, kind) == (403, "text/html")
            assert "does not open anything" in body
            _shows_nothing(body)


async def test_a_tampered_link_gets_403_and_nothing_of_the_run(store: Store, home: Path) -> None:
    await _seed(store, home)
    good = token(home, CHANNEL)
    version, payload, signature = good.split(".")
    altered = [
        f"{version}.{payload[:-1]}{'A' if payload[-1] != 'A' else 'B'}.{signature}",
        f"{version}.{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}",
        f"{version}.{payload}.",
        "v1.not-a-token",
    ]
    async with serving(store, home) as base:
        for bad in altered:
            status, kind, body = await _get(base, f"/v/{bad}/run/r-channel")
            assert (status, kind) == (403, "text/html"), bad
            _shows_nothing(body)


@pytest.mark.parametrize("conv", [OTHER_THREAD, DM], ids=["other-thread", "dm"])
async def test_a_link_of_another_conversation_does_not_open_the_run(
    store: Store, home: Path, conv: ConversationRef
) -> None:
    await _seed(store, home)
    link = token(home, conv)
    async with serving(store, home) as base:
        status, kind, body = await _get(base, f"/v/{link}/run/r-channel")
        assert (status, kind) == (404, "text/html")
        assert SECRET_SUMMARY not in body and SECRET_OUTPUT not in body
        # The same answer as for an id that exists nowhere: a link cannot probe for ids.
        status_unknown, _, unknown = await _get(base, f"/v/{link}/run/r-nowhere")
        assert status_unknown == 404
        assert body.replace("r-channel", "") == unknown.replace("r-nowhere", "")


async def test_a_channel_link_never_opens_a_dm_run(store: Store, home: Path) -> None:
    await _seed(store, home)
    async with serving(store, home) as base:
        status, _, body = await _get(base, f"/v/{token(home, CHANNEL)}/run/r-dm")
    assert status == 404
    assert DM_SUMMARY not in body and "dm output" not in body


async def test_the_overview_lists_only_the_links_own_conversation(store: Store, home: Path) -> None:
    await _seed(store, home)
    async with serving(store, home) as base:
        _, _, dm_page = await _get(base, f"/v/{token(home, DM)}/")
        _, _, channel_page = await _get(base, f"/v/{token(home, CHANNEL)}/")
        _, _, other_page = await _get(base, f"/v/{token(home, OTHER_THREAD)}/")
    assert "r-dm" in dm_page and DM_SUMMARY in dm_page
    assert "r-channel" not in dm_page and SECRET_SUMMARY not in dm_page
    assert "r-channel" in channel_page and SECRET_SUMMARY in channel_page
    assert "r-dm" not in channel_page and DM_SUMMARY not in channel_page
    assert "r-channel" not in other_page and "r-dm" not in other_page


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("unknown run", 404),
        ("bad characters in the id", 404),
        ("an id too long", 404),
        ("a 3000-character path", 414),
        ("a malformed token", 403),
        ("an unknown page", 404),
        ("an unknown static file", 404),
        ("POST", 405),
        ("PUT", 405),
        ("DELETE", 405),
        ("a doubled slash", 404),
        ("an upper-case V", 404),
        ("a token after an unknown page", 404),
    ],
)
async def test_bad_input_gets_a_plain_error_page_and_one_log_line(
    store: Store, home: Path, caplog: pytest.LogCaptureFixture, case: str, status: int
) -> None:
    await _seed(store, home)
    link = token(home, CHANNEL)
    method, path = {
        "unknown run": ("GET", f"/v/{link}/run/r-nowhere"),
        "bad characters in the id": ("GET", f"/v/{link}/run/r%3Cscript%3E%27%22"),
        "an id too long": ("GET", f"/v/{link}/run/{'r' * 65}"),
        "a 3000-character path": ("GET", f"/v/{link}/run/{'x' * 3000}"),
        "a malformed token": ("GET", f"/v/{link}%3C%3E!!/run/r-channel"),
        "an unknown page": ("GET", f"/v/{link}/secrets"),
        "an unknown static file": ("GET", "/static/..%2F..%2Fweb.key"),
        "POST": ("POST", f"/v/{link}/run/r-channel"),
        "PUT": ("PUT", f"/v/{link}/run/r-channel"),
        "DELETE": ("DELETE", f"/v/{link}/"),
        "a doubled slash": ("GET", f"//v/{link}/run/r-channel"),
        "an upper-case V": ("GET", f"/V/{link}/run/r-channel"),
        "a token after an unknown page": ("GET", f"/view/{link}"),
    }[case]
    async with serving(store, home) as base:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="bot.web"):
            got, kind, body = await _get(base, path, method)
    assert (got, kind) == (status, "text/html"), case
    assert f"{status}:" in body
    for leak in ("Traceback", 'File "', "Error:", SECRET_SUMMARY, SECRET_OUTPUT, link):
        assert leak not in body
    lines = [r for r in caplog.records if r.name.startswith("bot.web")]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    message = lines[0].getMessage()
    payload = link.split(".")[1]
    assert link not in message and payload not in message
    assert lines[0].exc_info is None


@pytest.mark.parametrize("where", ["path", "header"])
async def test_a_request_too_long_to_read_logs_one_warning_without_the_token(
    store: Store, home: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """aiohttp answers these itself (400) before the viewer sees them; its log says so in
    one line, without the request's text or a traceback."""
    link = token(home, CHANNEL)
    path = f"/v/{link}/run/{'x' * 9000}" if where == "path" else f"/v/{link}/run/r1"
    headers = {"X-Long": link * 80} if where == "header" else {}
    async with serving(store, home) as base, aiohttp.ClientSession() as client:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            async with client.get(base + path, headers=headers) as response:
                assert response.status == 400
                body = await response.text()
    assert "Traceback" not in body
    payload = link.split(".")[1]
    for record in caplog.records:
        message = record.getMessage()
        assert payload not in message and record.exc_info is None, record.name
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING
    assert warnings[0].name.startswith("bot.web")


async def test_error_pages_carry_the_strict_headers(store: Store, home: Path) -> None:
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
    ):
        for method, path in (("GET", "/"), ("GET", "/v/x/run/y"), ("POST", "/")):
            async with client.request(method, base + path) as response:
                assert response.headers["Content-Security-Policy"] == CSP
                assert response.headers["X-Content-Type-Options"] == "nosniff"
                assert response.headers["Referrer-Policy"] == "no-referrer"
                assert response.headers["Cache-Control"] == "no-store"


# ---------------------------------------------------------------------- campaigns

CAMPAIGN_GOAL = "goal-only-the-thread-may-see"


@pytest.mark.parametrize(
    ("conv", "expires_in", "status"),
    [
        (CHANNEL, 3600.0, 200),
        (CHANNEL, -1.0, 403),
        (OTHER_THREAD, 3600.0, 404),
        (DM, 3600.0, 404),
    ],
    ids=["own", "expired", "other-thread", "dm"],
)
async def test_a_campaign_opens_only_for_a_valid_link_of_its_conversation(
    store: Store, home: Path, conv: ConversationRef, expires_in: float, status: int
) -> None:
    await seed_campaign(
        store, CHANNEL, campaign_spec(goal=CAMPAIGN_GOAL), [SeedRound(values=(2.0,))]
    )
    link = token(home, conv, expires_in=expires_in)
    async with serving(store, home, poll_seconds=0.05) as base:
        got, kind, body = await _get(base, f"/v/{link}/campaign/c1")
        events, _, _ = await _get(base, f"/v/{link}/campaign/c1/events")
    assert (got, kind) == (status, "text/html")
    assert (CAMPAIGN_GOAL in body) == (status == 200)
    assert events == (200 if status == 200 else status)


async def test_a_dm_campaign_never_opens_from_the_channel(store: Store, home: Path) -> None:
    await seed_campaign(store, DM, campaign_spec(goal=CAMPAIGN_GOAL), campaign_id="c-dm")
    async with serving(store, home) as base:
        status, _, body = await _get(base, f"/v/{token(home, CHANNEL)}/campaign/c-dm")
    assert status == 404
    assert CAMPAIGN_GOAL not in body
