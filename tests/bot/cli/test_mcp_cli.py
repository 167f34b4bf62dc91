"""`raven-bot mcp list|tools` against the loopback MCP server over stdio (tests/fakes): state,
tool counts and names as agents see them, failed and silent servers with their reasons, a
missing or broken mcp.json, and secrets from .env that reach a server but never the output."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from bot.cli.main import main
from bot.cli.mcp import shown
from host.features.mcp.tools import agent_tool_name
from tests.bot.cli.mcp_home import fake_server, logging_kept, write_config
from tests.bot.cli.test_cli_imports import _imported_by
from tests.mcp_client.test_servers import http_url

__all__ = ["http_url", "logging_kept"]  # fixtures: the fake over HTTP; the root logger kept

SECRET = "s3cr3t-from-dotenv-0123"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _two_servers(home: Path) -> Path:
    return write_config(
        home,
        {
            "fake": fake_server(tools={"exclude": ["crash"]}),
            "broken": fake_server("--fail-start"),
        },
    )


def test_list_shows_each_servers_state_tools_and_why_one_failed(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_servers(isolated_env)
    code, out, err = _run(capsys, "mcp", "list")
    assert code == 0, err
    assert err == ""  # a table for people: no log lines
    header, *rows = out.splitlines()
    assert header.split() == ["SERVER", "TRANSPORT", "STATE", "TOOLS", "INIT", "ERROR"]
    fake = next(row for row in rows if row.startswith("fake "))
    # 8 tools, `crash` excluded in mcp.json.
    assert fake.split()[:4] == ["fake", "stdio", "ready", "7"]
    assert fake.split()[5] == "s"  # "0.63 s"
    broken = next(row for row in rows if row.startswith("broken "))
    assert broken.split()[:3] == ["broken", "stdio", "failed"]
    assert broken.endswith("stderr: fake-mcp: cannot read credentials file /nowhere")


def test_list_json_is_one_record_per_server(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_servers(isolated_env)
    code, out, _ = _run(capsys, "mcp", "list", "--json")
    assert code == 0
    by_name = {r["name"]: r for r in json.loads(out)}
    fake, broken = by_name["fake"], by_name["broken"]
    assert (fake["transport"], fake["state"], fake["tools"], fake["error"]) == (
        "stdio",
        "ready",
        7,
        None,
    )
    assert 0 < fake["initialize_seconds"] < 30
    assert broken["state"] == "failed" and broken["tools"] is None
    assert "closed the connection while starting" in broken["error"]
    assert broken["stderr"] == "fake-mcp: cannot read credentials file /nowhere"


def test_a_server_that_never_answers_is_reported_within_its_timeout(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_env, {"mute": fake_server("--silent", timeout=1)})
    code, out, _ = _run(capsys, "mcp", "list", "--json")
    assert code == 0
    (mute,) = json.loads(out)
    assert mute["state"] == "timeout"
    assert mute["error"] == (
        'no answer within 1 s (raise its "timeout" in mcp.json to wait longer)'
    )


def test_no_mcp_json_says_so_and_how_to_create_one(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "mcp", "list")
    assert code == 0, err
    assert f"No tool servers: {isolated_env / 'mcp.json'} does not exist." in out
    assert '{"mcpServers": {"github": {"command": "npx"' in out
    code, out, err = _run(capsys, "mcp", "list", "--json")
    assert (code, json.loads(out)) == (0, [])
    assert "does not exist" in err


def test_a_broken_mcp_json_is_one_line_naming_file_and_key(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(isolated_env, {"fake": fake_server(approval="sometimes")})
    for argv in (["mcp", "list"], ["mcp", "tools", "fake"]):
        code, out, err = _run(capsys, *argv)
        assert (code, out) == (2, "")
        assert err.startswith(f"raven-bot: {path}: mcpServers.fake.approval: ")
        assert err.count("\n") == 1


def test_tools_are_named_as_agents_see_them_after_the_filter(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_env, {"fake": fake_server(tools={"include": ["e*", "add"]})})
    code, out, err = _run(capsys, "mcp", "tools", "fake")
    assert code == 0, err
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()}
    assert set(lines) == {"mcp__fake__echo", "mcp__fake__environment", "mcp__fake__add"}
    assert lines["mcp__fake__echo"] == ["read-only", "Return the text unchanged."]
    assert lines["mcp__fake__add"][0] == "-"
    code, out, _ = _run(capsys, "mcp", "tools", "fake", "--json")
    echo = next(t for t in json.loads(out) if t["tool"] == "echo")
    assert echo == {
        "name": "mcp__fake__echo",
        "tool": "echo",
        "read_only": True,
        "description": "Return the text unchanged.",
    }


def test_a_tool_name_models_refuse_is_listed_as_agents_get_it(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: the CLI built `mcp__server__tool` itself, so `issues.search` was listed
    under a name no agent is ever given."""
    write_config(isolated_env, {"fake": fake_server("--dotted", tools={"include": ["issues*"]})})
    code, out, err = _run(capsys, "mcp", "tools", "fake", "--json")
    assert code == 0, err
    (dotted,) = json.loads(out)
    assert dotted["tool"] == "issues.search"
    assert dotted["name"] == agent_tool_name("fake", "issues.search")
    assert re.fullmatch(r"mcp__fake__issues_search_[0-9a-f]{8}", dotted["name"]), dotted


def test_an_unknown_server_gets_did_you_mean_and_the_names(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_servers(isolated_env)
    code, out, err = _run(capsys, "mcp", "tools", "fak")
    assert (code, out) == (2, "")
    assert "no MCP server named `fak`" in err
    assert "(did you mean 'fake'?)" in err
    assert err.rstrip().endswith("its servers: broken, fake")


def test_tools_of_a_server_that_fails_exits_1_with_its_reason(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_servers(isolated_env)
    code, out, err = _run(capsys, "mcp", "tools", "broken")
    assert (code, out) == (1, "")
    assert err.startswith("raven-bot: MCP server `broken` did not start (failed): ")
    assert "stderr: fake-mcp: cannot read credentials file /nowhere" in err


def test_a_secret_from_dotenv_reaches_the_server_but_never_the_output(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # .env in the working directory, as the bot reads it (isolated_env runs tests in cwd/).
    Path(".env").write_text(f"TRACKER_TOKEN={SECRET}\n")
    leaky = "import os, sys; print('token is', os.environ['TOKEN'], file=sys.stderr); sys.exit(2)"
    write_config(
        isolated_env,
        {
            "fake": fake_server(env={"TOKEN": "${TRACKER_TOKEN}"}),
            "leaky": {
                "command": sys.executable,
                "args": ["-c", leaky],
                "env": {"TOKEN": "${TRACKER_TOKEN}"},
            },
        },
    )
    outputs = [_run(capsys, "mcp", "list"), _run(capsys, "mcp", "list", "--json")]
    outputs.append(_run(capsys, "mcp", "tools", "leaky"))
    for _, out, err in outputs:
        assert SECRET not in out + err
    records = {r["name"]: r for r in json.loads(outputs[1][1])}
    assert records["fake"]["state"] == "ready"  # ${TRACKER_TOKEN} was found in .env
    assert records["leaky"]["stderr"] == "token is ****"  # the server's words, masked


async def test_a_streamable_http_server_is_listed_without_its_header_secret(
    isolated_env: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    http_url: str,
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", SECRET)
    write_config(
        isolated_env,
        {
            "docs": {
                "type": "http",
                "url": http_url,
                "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                "allow_private_network": True,
            }
        },
    )
    # main() runs its own event loop: in a worker thread, beside this test's.
    code = await asyncio.to_thread(main, ["mcp", "list", "--json"])
    listed = capsys.readouterr().out
    (docs,) = json.loads(listed)
    assert (code, docs["transport"], docs["state"], docs["tools"]) == (0, "http", "ready", 8)
    code = await asyncio.to_thread(main, ["mcp", "tools", "docs"])
    tools = capsys.readouterr().out
    assert code == 0
    assert "mcp__docs__header " in tools
    assert SECRET not in listed + tools


def test_untrusted_text_is_one_printable_line_without_secrets() -> None:
    text = "ok \x1b[2J\x1b]0;pwned\x07 Bearer tok-123456\nsecond line"
    assert shown(text, ["Bearer tok-123456"], 200) == "ok [2J ]0;pwned **** second line"
    assert shown("x" * 50, [], 10) == "x" * 9 + "…"


def test_the_mcp_command_imports_no_runtime() -> None:
    assert _imported_by("import bot.cli.mcp") == []
