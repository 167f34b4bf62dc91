"""`doctor` says whether the viewer is served and where its links point."""

from __future__ import annotations

import pytest

from bot.cli.doctor import run_checks
from bot.settings import load_settings


async def _line(monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str, str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    checks = await run_checks(load_settings())
    (check,) = [c for c in checks if c.name == "web viewer"]
    return check.level, check.detail


async def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _line(monkeypatch) == ("ok", "off (RAVEN_WEB_PORT unset): no viewer, no links")


async def test_on_names_the_address_and_the_links(monkeypatch: pytest.MonkeyPatch) -> None:
    level, detail = await _line(
        monkeypatch, RAVEN_WEB_PORT="8787", RAVEN_WEB_PUBLIC_URL="https://raven.example.com"
    )
    assert level == "ok"
    assert detail == (
        "serves on 127.0.0.1:8787; posted links open at https://raven.example.com for 24 h"
    )


async def test_plain_http_beyond_this_machine_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    level, detail = await _line(monkeypatch, RAVEN_WEB_PORT="8787", RAVEN_WEB_HOST="0.0.0.0")
    assert level == "warn" and "RAVEN_WEB_PUBLIC_URL" in detail
