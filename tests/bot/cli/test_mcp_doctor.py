"""doctor's `mcp` line: no mcp.json is fine, a broken one fails doctor with its one-line
error, configured servers are connected (loopback fake over stdio) and reported with their
tools and initialize time or why they did not start, and a silent server cannot hold doctor
past its cap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.cli import doctor
from bot.cli.main import main
from bot.settings import load_settings
from host.features.mcp import probe
from tests.bot.cli.mcp_home import fake_server, logging_kept, write_config

__all__ = ["logging_kept"]  # a fixture: the root logger kept for the next test


async def _mcp_check() -> doctor.Check:
    """The `mcp` line among the capabilities' own checks, as doctor runs them."""
    checks = await asyncio.wait_for(doctor._check_features(load_settings()), 20)
    (check,) = [c for c in checks if c.name == "mcp"]
    return check


async def test_no_mcp_json_is_ok(isolated_env: Path) -> None:
    check = await _mcp_check()
    assert (check.name, check.level) == ("mcp", "ok")
    assert check.detail == f"no tool servers ({isolated_env / 'mcp.json'} absent)"


async def test_each_server_reports_its_tools_and_initialize_time_or_why_not(
    isolated_env: Path,
) -> None:
    write_config(
        isolated_env,
        {
            "fake": fake_server(tools={"exclude": ["hang", "crash"]}),
            "broken": fake_server("--fail-start"),
        },
    )
    check = await _mcp_check()
    assert check.level == "warn"  # the bot serves; only broken's tools are missing
    fake, broken = check.detail.split("; ", 1)
    assert fake.startswith("fake: 6 tool(s), initialize ") and fake.endswith(" s")
    assert broken.startswith("broken: failed (")
    assert broken.endswith("stderr: fake-mcp: cannot read credentials file /nowhere)")


async def test_every_server_ready_is_ok(isolated_env: Path) -> None:
    write_config(isolated_env, {"fake": fake_server()})
    check = await _mcp_check()
    assert check.level == "ok", check.detail
    assert check.detail.startswith("fake: 8 tool(s), initialize ")


async def test_a_silent_server_cannot_hold_doctor_past_its_cap(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mcp.json allows it ten minutes; doctor waits at most its own cap.
    monkeypatch.setattr(probe, "DOCTOR_WAIT", 1.0)
    write_config(isolated_env, {"mute": fake_server("--silent", timeout=600)})
    check = await _mcp_check()
    assert (check.level, check.detail) == (
        "warn",
        "mute: timeout (no answer within 1 s (doctor's limit))",
    )


def test_a_broken_mcp_json_fails_doctor_with_its_one_line_error(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(isolated_env, {"fake": {"args": ["x"]}})
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 1
    line = next(line for line in out.splitlines() if line[9:].startswith("mcp "))
    assert line.startswith("  [FAIL] mcp")
    assert line.endswith(f"{path}: mcpServers.fake.command: missing; add it")
    assert "FAILED: mcp" in out
