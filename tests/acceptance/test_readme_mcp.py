"""The README's tool servers (MCP), as a team sets them up: its mcp.json pasted in (the
`tracker` pointed at a fake tracker over stdio, `docs` at the same fake over streamable HTTP),
the secrets in the `.env` of the directory the bot starts in, its permissions.toml and
agents.toml blocks. The real `raven-bot chat` in a terminal, offline: the README's `mcp:` line
runs a read-only tool without asking, a write tool asks with the exact call and runs on `1`,
the `allow` rule runs `get_issue`, the excluded `delete_issue` is not offered, `[mcp …]` on a
plan line. The operator's `raven-bot mcp …` and `doctor` lines. A broken mcp.json stops the
start. On the Slack fake, the same write call is approved with the prompt's button, which a
bystander cannot press. What people read stays clean and never shows a secret."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.acceptance.harness import (
    REPO,
    VENV,
    WITHIN,
    Commands,
    Console,
    noise,
    product_env,
    project_dir,
    serving,
    sh,
    slack_env,
    wait_until,
)
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import db_rows, eventually

# Real processes (the raven-bot CLI, a pty, tool servers, the Slack fake): `-m "not slow"`
# skips them.
pytestmark = pytest.mark.slow

MCP_JSON = """\
{
  "mcpServers": {
    "tracker": {
      "command": "python3",
      "args": ["/opt/tools/tracker_server.py"],
      "env": {"TRACKER_TOKEN": "${TRACKER_TOKEN}"},
      "tools": {"exclude": ["delete_*"]},
      "approval": "smart",
      "agents": ["research"]
    },
    "docs": {
      "type": "http",
      "url": "http://127.0.0.1:8931/mcp",
      "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
      "allow_private_network": true
    }
  }
}"""
PERMISSIONS_TOML = """\
[default]
allow = ["mcp:tracker:get_*"]
deny = ["mcp:tracker:delete_*"]"""
AGENTS_TOML = """\
[agents.code]
mcp = ["tracker"]"""
README_CALL = 't1: mcp: tracker search_issues {"query": "flaky"}'
MCP_LIST = "raven-bot mcp list"
MCP_TOOLS = "raven-bot mcp tools tracker"
DOCTOR = "raven-bot doctor"
# The command table's lines (run as `raven-bot mcp list --json` and `… tools tracker --json`).
MCP_LIST_JSON = "raven-bot mcp list [--json]"
MCP_TOOLS_JSON = "raven-bot mcp tools SERVER [--json]"

README_EXAMPLES = [
    MCP_JSON,
    PERMISSIONS_TOML,
    AGENTS_TOML,
    README_CALL,
    MCP_LIST,
    MCP_TOOLS,
    DOCTOR,
    MCP_LIST_JSON,
    MCP_TOOLS_JSON,
]

TRACKER = REPO / "tests" / "fakes" / "tracker_mcp_server.py"
# The team's secrets, in the `.env` of the directory the bot starts in (not its environment).
TRACKER_TOKEN = "trk-acceptance-5f0c2e7d9a"
DOCS_TOKEN = "docs-acceptance-81b4c6e2f3"
DOTENV = f"TRACKER_TOKEN={TRACKER_TOKEN}\nDOCS_TOKEN={DOCS_TOKEN}\n"
CREATE_CALL = 'tracker create_issue {"title": "fix the flaky upload test"}'
CREATED = "created TRK-200: fix the flaky upload test"
FLAKY = ("TRK-101 flaky test_upload times out on CI", "TRK-103 flaky integration suite")


def _fingerprint(token: str) -> str:
    """What the fake's `whoami` answers for a request carrying `token`."""
    return f"sha256:{hashlib.sha256(token.encode()).hexdigest()[:12]}"


def pasted_mcp_json(docs_port: int) -> str:
    """The README's mcp.json as a team pastes it, with the tracker's command pointed at the
    fake tracker and the docs server's port at the fake serving HTTP. The fake lives outside
    the system's directories, with its Python's `mcp` package in the virtualenv: as the README
    says, such a server's entry names them in `readonly` for the sandbox. Nothing else changed."""
    readonly = json.dumps([str(TRACKER.parent), str(VENV)])
    replacements = [
        ('"command": "python3"', f'"command": {json.dumps(sys.executable)}'),
        (
            '"args": ["/opt/tools/tracker_server.py"],',
            f'"args": [{json.dumps(str(TRACKER))}],\n      "readonly": {readonly},',
        ),
        ("127.0.0.1:8931", f"127.0.0.1:{docs_port}"),
    ]
    text = MCP_JSON
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text + "\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def docs_port() -> Iterator[int]:
    """The README's `docs` server: the fake tracker over streamable HTTP on a free port."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(TRACKER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _accepts(port), "the docs server to accept connections")
        yield port
    finally:
        server.kill()
        server.wait(timeout=WITHIN)


def _team_home(root: Path, docs_port: int, *, agents_toml: bool = False) -> Path:
    """A RAVEN_HOME with the README's mcp.json and permissions.toml (and agents.toml)."""
    home = root / "raven-home"
    home.mkdir(parents=True)
    (home / "mcp.json").write_text(pasted_mcp_json(docs_port))
    (home / "permissions.toml").write_text(PERMISSIONS_TOML + "\n")
    if agents_toml:
        (home / "agents.toml").write_text(AGENTS_TOML + "\n")
    return home


def _team_project(root: Path) -> Path:
    """The directory the bot starts in, its `.env` holding the servers' secrets."""
    project = project_dir(root / "project")
    (project / ".env").write_text(DOTENV)
    return project


def _env(home: Path) -> dict[str, str]:
    """A user's environment: the secrets are in `.env` only."""
    env = product_env(home)
    for name in ("TRACKER_TOKEN", "DOCS_TOKEN"):
        env.pop(name, None)
    return env


@dataclass
class World:
    """The team's RAVEN_HOME and project directory, their shell, the console."""

    home: Path
    shell: Commands
    console: Console


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, docs_port: int) -> Iterator[World]:
    root = tmp_path_factory.mktemp("readme-mcp")
    home = _team_home(root, docs_port)
    project = _team_project(root)
    with ThreadPoolExecutor(max_workers=1) as pool:
        shell = Commands(project, _env(home), pool)
        console = Console(shell.env, project)
        try:
            yield World(home, shell, console)
        finally:
            console.close()


@pytest.fixture
def console(world: World) -> Console:
    """The running console; unmatched output of an earlier test is not looked at."""
    world.console.skip()
    return world.console


def _submit(console: Console, *lines: str) -> None:
    """Type a plan line by line; the last line (`confirm` or blank) submits it."""
    for n, line in enumerate(lines):
        console.type(line)
        if n < len(lines) - 1:
            console.expect_text("plan> ")


def _report(console: Console, node: str, end: str = "completed") -> str:
    """The run report of the plan whose only node is `node`, up to its record line; it must
    say the run ended `end`."""
    shown = console.expect(
        rf"Run run_\w+ (?:completed|failed|not approved|cancelled) — Explicit plan: {node} "
        r"\(mcp\)[\s\S]*?Full record:.*\n"
    )
    assert re.search(rf"Run run_\w+ {end} — ", shown), shown
    return shown


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _runs(home: Path) -> int:
    return int(db_rows(home, "SELECT count(*) FROM graph_runs")[0][0])


def _audit(home: Path, subject: str) -> list[tuple[Any, ...]]:
    return db_rows(
        home,
        "SELECT allowed, tier, rule FROM permission_audit WHERE tool = 'mcp' AND subject = ?",
        subject,
    )


# -- The console ----------------------------------------------------------------------------


def test_the_readme_call_runs_a_read_only_tool_without_asking(
    world: World, console: Console
) -> None:
    console.expect_text("you> ")
    _submit(console, README_CALL, "")
    shown = _report(console, "t1")
    # `approval: smart` and search_issues is read-only: no question before the report.
    assert "asks permission" not in shown and "Reply with a number" not in shown, shown
    # The fake tracker answers only with TRACKER_TOKEN: `${TRACKER_TOKEN}` came from `.env`.
    report = " ".join(shown.split())
    assert all(issue in report for issue in FLAKY), shown
    assert "TRK-102" not in report, shown
    assert not db_rows(world.home, "SELECT 1 FROM prompts"), "a question was asked"
    assert _audit(world.home, "tracker:search_issues") == [
        (1, "mode", 'approval = "smart" for tracker in mcp.json')
    ]


def test_a_write_tool_asks_with_the_exact_call_and_1_runs_it(
    world: World, console: Console
) -> None:
    _submit(console, f"t2: mcp: {CREATE_CALL}", "")
    prompt = console.expect(r"The t2 node asks permission:[\s\S]*?Reply with a number")
    # "the approval shows the exact call"
    assert CREATE_CALL in _lines(prompt), prompt
    assert "1) Allow once" in prompt and "Deny" in prompt, prompt
    assert not db_rows(world.home, "SELECT 1 FROM permission_audit WHERE subject LIKE '%create%'")
    console.type("1")
    shown = _report(console, "t2")
    # "the report shows the result"
    assert CREATED in _lines(shown), shown
    assert _audit(world.home, "tracker:create_issue") == [(1, "human", None)]


def test_the_allow_rule_runs_get_issue(world: World, console: Console) -> None:
    _submit(console, 'g1: mcp: tracker get_issue {"id": "TRK-200"}', "")
    shown = _report(console, "g1")
    assert "asks permission" not in shown, shown
    # The issue the approved call created: one server process, followed across runs.
    assert "TRK-200 fix the flaky upload test (state: open)" in _lines(shown), shown
    # "rules decide first": allowed by permissions.toml, not by the server's annotation.
    assert _audit(world.home, "tracker:get_issue") == [(1, "user_allow", "mcp:tracker:get_*")]


def test_the_stdio_server_sees_only_its_declared_secret(console: Console) -> None:
    _submit(console, "v1: mcp: tracker variable_names {}", "")
    (names,) = [line.split() for line in _lines(_report(console, "v1")) if "TRACKER_TOKEN" in line]
    # "a server sees no other variable of the bot's": not the other server's secret from the
    # same `.env`, not RAVEN_HOME.
    assert "DOCS_TOKEN" not in names and "RAVEN_HOME" not in names, names


def test_an_excluded_tool_is_not_offered(world: World, console: Console) -> None:
    _submit(console, 'x1: mcp: tracker delete_issue {"id": "TRK-101"}', "")
    shown = " ".join(_report(console, "x1", "failed").split())
    assert "The tool server tracker offers no tool delete_issue" in shown, shown
    assert "delete_issue" not in shown.split("(it offers")[1].split(";")[0], shown
    assert _audit(world.home, "tracker:delete_issue") == []


def test_the_http_server_gets_its_header_from_dotenv(world: World, console: Console) -> None:
    # `docs` has the default approval, `ask`: even a read-only tool asks.
    _submit(console, "d1: mcp: docs whoami {}", "")
    prompt = console.expect(r"The d1 node asks permission:[\s\S]*?Reply with a number")
    assert "docs whoami {}" in _lines(prompt), prompt
    console.type("1")
    shown = _report(console, "d1")
    assert _fingerprint(DOCS_TOKEN) in _lines(shown), shown


def test_plan_lines_name_their_servers(world: World, console: Console) -> None:
    # A plan line naming a server its agent can use is admitted (its approval comes first).
    runs = _runs(world.home)
    _submit(console, "r1: research: triage the flaky tests [mcp tracker]", "confirm")
    plan = console.expect(r"Run this graph\?[\s\S]*?Reply with a number")
    assert "• r1 → research: triage the flaky tests" in _lines(plan), plan
    console.type("2")
    console.expect(r"Graph not approved \(denied by root\): nothing ran\.")
    # "admission refuses a server that does not exist or an agent that cannot call tools"
    _submit(console, "r2: research: triage [mcp tracker, nosuch]", "")
    refused = " ".join(console.expect(r"raven> [^\n]*(?:\n[ \t]+\S[^\n]*)*\n").split())
    unknown = "Graph rejected (capability) at node r2, field mcp: no tool server named nosuch"
    assert unknown in refused, refused
    assert "use servers from mcp.json (docs, tracker;" in refused, refused
    _submit(console, "s1: shell: echo hi [mcp tracker]", "")
    refused = " ".join(console.expect(r"raven> [^\n]*(?:\n[ \t]+\S[^\n]*)*\n").split())
    shell_refused = "at node s1, field mcp: agent shell cannot call tools from a tool server"
    assert shell_refused in refused, refused
    assert _runs(world.home) == runs, "a refused or denied plan makes no run"


def test_the_console_exits_at_end_of_input(world: World) -> None:
    assert world.console.end() == 0


# -- The command line -----------------------------------------------------------------------


def test_mcp_list_shows_both_servers_ready(world: World) -> None:
    result = world.shell.sh(MCP_LIST)
    assert result.code == 0, result.both
    rows = {line.split()[0]: line.split() for line in result.out.splitlines()[1:] if line}
    assert rows["tracker"][1:4] == ["stdio", "ready", "5"], result.out
    assert rows["docs"][1:4] == ["http", "ready", "6"], result.out


def test_mcp_tools_lists_the_tracker_as_agents_see_it(world: World) -> None:
    result = world.shell.sh(MCP_TOOLS)
    assert result.code == 0, result.both
    tools = {line.split()[0]: line.split()[1] for line in result.out.splitlines() if line}
    assert tools == {
        "mcp__tracker__search_issues": "read-only",
        "mcp__tracker__get_issue": "read-only",
        "mcp__tracker__create_issue": "-",
        "mcp__tracker__whoami": "read-only",
        "mcp__tracker__variable_names": "read-only",
    }, result.out


def test_mcp_list_and_tools_as_json(world: World) -> None:
    listed = world.shell.sh("raven-bot mcp list --json")
    assert listed.code == 0, listed.both
    servers = {s["name"]: (s["transport"], s["state"], s["tools"]) for s in json.loads(listed.out)}
    assert servers == {"tracker": ("stdio", "ready", 5), "docs": ("http", "ready", 6)}, listed.out
    tools = world.shell.sh("raven-bot mcp tools tracker --json")
    assert tools.code == 0, tools.both
    hints = {t["name"]: t["read_only"] for t in json.loads(tools.out)}
    assert hints == {
        "mcp__tracker__search_issues": True,
        "mcp__tracker__get_issue": True,
        "mcp__tracker__create_issue": False,
        "mcp__tracker__whoami": True,
        "mcp__tracker__variable_names": True,
    }, tools.out


def test_doctor_reports_each_server_and_the_rules(world: World) -> None:
    result = world.shell.sh(DOCTOR)
    assert result.code == 0, result.both
    (mcp,) = [line for line in result.out.splitlines() if re.match(r"\s*\[ok\s*\] mcp\s", line)]
    assert re.search(r"tracker: 5 tool\(s\), initialize \d+\.\d+ s", mcp), mcp
    assert re.search(r"docs: 6 tool\(s\), initialize \d+\.\d+ s", mcp), mcp
    (rules,) = [line for line in result.out.splitlines() if "] permissions " in line]
    assert "1 allow / 1 deny rule(s)" in rules, rules


# -- Starting --------------------------------------------------------------------------------


def test_the_bot_starts_with_the_agents_toml_block(tmp_path: Path, docs_port: int) -> None:
    home = _team_home(tmp_path, docs_port, agents_toml=True)
    project = _team_project(tmp_path)
    result = sh(".venv/bin/raven-bot chat", env=_env(home), cwd=project, stdin="status\n")
    assert result.code == 0, result.both
    assert "Status" in result.out, result.both


def test_without_the_dotenv_the_start_names_the_missing_secret(
    tmp_path: Path, docs_port: int
) -> None:
    # The control for `${VAR}` read from `.env`: the same setup started where no `.env` is.
    home = _team_home(tmp_path, docs_port)
    project = project_dir(tmp_path / "elsewhere")
    result = sh(".venv/bin/raven-bot chat", env=_env(home), cwd=project, stdin="status\n")
    assert result.code == 2, result.both
    assert result.both.splitlines() == [
        f"raven-bot: {home / 'mcp.json'}: mcpServers.tracker.env.TRACKER_TOKEN: "
        "${TRACKER_TOKEN} is not set; add it to the bot's .env or environment"
    ], result.both


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"args": ["server.py"]}, "mcpServers.tracker.command"),
        ({"command": "python3", "approval": "sometimes"}, "mcpServers.tracker.approval"),
    ],
)
def test_a_broken_mcp_json_stops_the_start_naming_file_and_key(
    tmp_path: Path, entry: dict[str, Any], key: str
) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    broken = home / "mcp.json"
    broken.write_text(json.dumps({"mcpServers": {"tracker": entry}}))
    project = project_dir(tmp_path / "project")
    result = sh(".venv/bin/raven-bot chat", env=_env(home), cwd=project, stdin="status\n")
    assert result.code == 2, result.both
    (line,) = result.both.splitlines()
    assert str(broken) in line and key in line, line


# -- What people read ------------------------------------------------------------------------


def test_what_people_read_is_clean_and_holds_no_secret(world: World) -> None:
    shown = [*world.shell.shown, ("console", world.console.transcript)]
    log = world.home / "logs" / "raven.log"
    found = [f"[{what}] {line}" for what, text in shown for line in noise(text)]
    assert not found, "\n".join(found[:20])
    for token in (TRACKER_TOKEN, DOCS_TOKEN):
        assert not [what for what, text in shown if token in text], token
        assert token not in log.read_text(), f"{token} in {log}"


# -- Slack -----------------------------------------------------------------------------------

CHANNEL = "C0GENERAL"
ALICE, BOB = "U0AL1CE42", "U0B0B0042"


@dataclass
class Thread:
    """Alice's thread on the Slack fake, served by the real process."""

    slack: FakeSlack
    home: Path
    ts: str = ""

    async def mention(self, user: str, text: str) -> None:
        self.ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, user, f"<@UBOT> {text}", self.ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def posts(self) -> list[dict[str, Any]]:
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == self.ts
        ]

    async def click(self, post: dict[str, Any], label: str, user: str) -> None:
        (button,) = [b for b in _buttons(post) if b["text"]["text"] == label]
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            user,
            CHANNEL,
            post["ts"],
            thread_ts=self.ts,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)


def _buttons(post: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = post.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


@pytest_asyncio.fixture
async def thread(tmp_path: Path, docs_port: int) -> AsyncIterator[Thread]:
    home = _team_home(tmp_path, docs_port)
    async with FakeSlack() as slack:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        slack.add_user(BOB, "bob", real_name="Bob Hope", display_name="bob")
        env = slack_env(home, slack.api_url)
        for name in ("TRACKER_TOKEN", "DOCS_TOKEN"):
            env.pop(name, None)
        log = tmp_path / "raven-bot.log"
        async with serving(env, _team_project(tmp_path), log):
            try:
                await slack.wait_connected(within=WITHIN)
            except AssertionError as exc:  # say why: the bot's own last words
                raise AssertionError(
                    f"{exc}\nthe bot's output:\n{log.read_text()[-4000:]}"
                ) from None
            yield Thread(slack, home)


async def test_slack_a_write_call_is_approved_by_its_button(thread: Thread) -> None:
    await thread.mention(ALICE, f"t2: mcp: {CREATE_CALL}")

    def prompts() -> list[dict[str, Any]]:
        return [p for p in thread.posts() if _buttons(p)]

    await eventually(prompts, within=WITHIN, what="the permission prompt")
    (prompt,) = prompts()
    assert CREATE_CALL in str(prompt["text"]), prompt["text"]
    labels = [b["text"]["text"] for b in _buttons(prompt)]
    assert labels == ["Allow once", "Allow in this conversation", "Deny"], labels

    # Bob, a bystander, clicks: he is told so, and the call still waits for Alice.
    await thread.click(prompt, "Allow once", BOB)
    (note,) = await thread.slack.wait_for_call("chat.postEphemeral", within=WITHIN)
    assert note.args["user"] == BOB and "Only alice" in note.args["text"], note.args
    assert db_rows(thread.home, "SELECT state FROM prompts") == [("pending",)]
    assert not _audit(thread.home, "tracker:create_issue")

    await thread.click(prompt, "Allow once", ALICE)

    def reports() -> list[str]:
        return [str(p["text"]) for p in thread.posts() if "Nodes:" in str(p["text"])]

    await eventually(reports, within=WITHIN, what="the run's report")
    (report,) = reports()
    assert "completed" in report and CREATED in report, report
    assert db_rows(thread.home, "SELECT state, answered_by FROM prompts") == [("answered", ALICE)]
    assert _audit(thread.home, "tracker:create_issue") == [(1, "human", None)]
