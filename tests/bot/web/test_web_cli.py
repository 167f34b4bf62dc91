"""`raven-bot web link RUN|CAMPAIGN` prints a link that opens the record's conversation (and
says why it cannot: an unknown id, no viewer set up); `raven-bot web` serves the viewer
alone until SIGTERM, and `--port` takes only a port."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from bot.cli.main import main
from bot.schema import all_migrations
from bot.web.tokens import LinkKey
from core.store import Store
from tests.bot.cli.mcp_home import logging_kept
from tests.bot.web.seed import CHANNEL, DM, SeedNode, seed_run, token
from tests.bot.web.seed_campaign import campaign_spec, seed_campaign

__all__ = ["logging_kept"]  # fixture: the root logger given back after main()

RAVEN = str(Path(sys.executable).with_name("raven-bot"))
WITHIN = 60.0  # hang guard for the served process


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _seed(home: Path) -> None:
    """A run in a channel's thread and a campaign in a DM, in RAVEN_HOME's database."""

    home.mkdir(parents=True, exist_ok=True)

    async def write() -> None:
        store = Store(home / "raven.db", all_migrations())
        await store.open()
        try:
            await seed_run(store, home, CHANNEL, [SeedNode("a1")], run_id="run_0123456789")
            await seed_campaign(store, DM, campaign_spec(), campaign_id="camp_42")
        finally:
            await store.close()

    asyncio.run(write())


def _granted(home: Path, url: str, base: str, page: str) -> str:
    """The conversation a printed link opens (its base and page as expected)."""
    found = re.fullmatch(rf"{re.escape(base)}/v/([^/]+)/{re.escape(page)}", url)
    assert found is not None, url
    return LinkKey.load(home).verify(found[1], now=time.time()).conversation_id


def test_web_link_prints_a_link_to_the_records_conversation(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(isolated_env)
    monkeypatch.setenv("RAVEN_WEB_PORT", "8787")
    assert main(["web", "link", "run_0123456789"]) == 0
    out, err = capsys.readouterr()
    base = "http://127.0.0.1:8787"
    assert _granted(isolated_env, out.strip(), base, "run/run_0123456789") == CHANNEL.id
    assert "24 h" in err
    assert main(["web", "link", "camp_42"]) == 0
    out, _ = capsys.readouterr()
    assert _granted(isolated_env, out.strip(), base, "campaign/camp_42") == DM.id
    # Behind a proxy the link starts with the public base.
    monkeypatch.setenv("RAVEN_WEB_PUBLIC_URL", "https://raven.example.com/raven/")
    assert main(["web", "link", "camp_42"]) == 0
    out, _ = capsys.readouterr()
    public = "https://raven.example.com/raven"
    assert _granted(isolated_env, out.strip(), public, "campaign/camp_42") == DM.id


def test_web_link_to_an_unknown_id_says_where_the_ids_are(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(isolated_env)
    monkeypatch.setenv("RAVEN_WEB_PORT", "8787")
    assert main(["web", "link", "run_nope"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "no run or campaign `run_nope`" in err and "`raven-bot runs list`" in err


def test_web_link_without_the_viewer_set_up_names_raven_web_port(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(isolated_env)
    assert main(["web", "link", "run_0123456789"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "RAVEN_WEB_PORT" in err
    assert not (isolated_env / "web.key").exists()


def test_web_without_a_port_names_raven_web_port(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["web"]) == 2
    err = capsys.readouterr().err
    assert "RAVEN_WEB_PORT" in err and "--port" in err


def test_web_on_a_port_in_use_names_the_option_given(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        assert main(["web", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    # The operator passed --port: the error names it, not a setting they never wrote.
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in err, err
    assert "RAVEN_WEB_PORT" not in err


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_web_port_takes_only_a_port(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["web", "--port", port])
    assert stopped.value.code == 2
    assert f"{port!r} is not a port" in capsys.readouterr().err


@pytest.mark.slow  # a real process
async def test_web_serves_alone_refuses_no_link_and_stops_on_sigterm(
    isolated_env: Path,
) -> None:
    await asyncio.to_thread(_seed, isolated_env)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "web",
        "--port",
        str(port),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), WITHIN)
        assert first.decode().startswith(f"Serving the read-only viewer on http://127.0.0.1:{port}")
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/") as response:
                assert response.status == 403
            async with http.get(f"{base}/v/not-a-token/run/run_0123456789") as response:
                assert response.status == 403
            # The operator's link opens the run on the viewer served alone.
            opened = f"{base}/v/{token(isolated_env, CHANNEL)}/run/run_0123456789"
            async with http.get(opened) as response:
                assert response.status == 200
                assert "run_0123456789" in await response.text()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), WITHIN)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
