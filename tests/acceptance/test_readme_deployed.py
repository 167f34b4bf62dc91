"""The bot as deployed, in the README's order: its configuration files written into
RAVEN_HOME as the README shows them, `.venv/bin/raven-bot doctor` (which checks the Slack and
Discord tokens), then `raven-bot run` serving Slack (Socket Mode) and Discord at once against
the loopback fakes. In each, a person types the README's in-thread examples: approvals by
button and by typed number, `help`, `stop`, and what the configuration says (the shell allow
list, a switched-off agent). `raven-bot graph validate` reads agents from the same files.
What people read stays clean.

Substituted, because they cannot exist here: machines.toml's `/srv/projects/toy` (the local
machine's workdir) and `/data/imagenet` (its read-only mount) become directories of this
test. Kept as written: the `gpu-box.internal` ssh host and the `cluster` Slurm controller do
not exist here either, and the README promises that an unreachable machine is reported, not
fatal (`doctor` warns; the bot starts); `my-review-tool` is not installed, so the README's
`reviewer` agent is disabled with the reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from tests.acceptance.harness import (
    REPO,
    WITHIN,
    Result,
    noise,
    project_dir,
    running,
    serving,
    sh,
    slack_env,
)
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

AGENTS_TOML = """\
[agents.reviewer]
backend = "cli"                   # inproc | cli | api | acp
description = "Reviews a diff and lists problems."
command = ["my-review-tool", "--stdin"]
prompt_via = "stdin"              # or "arg"
file_capable = true
timeout_seconds = 600

[agents.code]
enabled = false                   # switch a default agent off

[agents.shell]
# Shell-style globs matched against the whole command (`*`, `?`, `[...]`). A command with
# `;` `&` `|` `<` `>` a backtick, `$(` or a newline always asks, whatever the patterns.
allow = ["ls", "ls *", "echo *", "python3 -m pytest*"]"""

PERMISSIONS_TOML = """\
[default]
mode = "smart"
deny = ["run_shell:curl * | sh"]

[workspace."T0123"]
mode = "ask-everything"
allow = ["run_shell:pytest*", "run_shell:git status"]"""

MACHINES_TOML = """\
[machines.local]
kind = "local"
workdir = "/srv/projects/toy"   # chat campaigns run here (writable); else the workspace
mounts = ["/data/imagenet"]     # also readable (read-only) by every round on this machine

[machines.gpu-box]
kind = "ssh"          # the system ssh, BatchMode; commands run in `workdir` on that host
host = "gpu-box.internal"
user = "ml"
workdir = "/scratch/project"    # logs and exit codes go to ~/raven-rounds/ there
slots = 2

users = ["U0123", "U0456"]   # who may run rounds here ("*": everyone); roles = [...] too
approvers = ["U0999"]        # whose approval every command here also needs

[machines.cluster]
kind = "slurm"        # sbatch / squeue / scontrol / scancel on this host (shared filesystem)
partition = "debug"
workdir = "/shared/project"     # RAVEN_HOME/campaigns/ must be shared with the nodes too
slots = 8
user_slots = 2        # one person's campaigns hold at most 2 of the 8 slots
roles = ["1122334455"] # Discord role ids whose members may use it"""

README_EXAMPLES = [
    "bot/slack/manifest.yaml",
    AGENTS_TOML,
    PERMISSIONS_TOML,
    MACHINES_TOML,
    ".venv/bin/raven-bot doctor",
    "raven-bot doctor",
    "raven-bot run",
    "raven-bot graph validate FILE.json [--agents FILE]",
    's2: shell: echo "hello from the sandbox" && uname -a\nconfirm',
    "help",
    "stop",
    "schedule: every 2h | s1: shell: df -h .",
    "watch: every 30m | check: curl -fsS http://localhost:8080/health",
]

VALIDATIONS = (
    "raven-bot graph validate code.json",
    "raven-bot graph validate code.json --agents defaults.toml",
)


def _graph(agent: str, task: str) -> str:
    """A graph submission file (host/agent/guides/orchestration.md's format), one node."""
    node = {"id": "n1", "agent": agent, "template": task, "deps": [], "inputs": {}}
    return json.dumps({"task_summary": f"one {agent} node", "nodes": [node]})


# "It asks for the scopes the bot needs (…)": the README's Slack step 1.
README_SCOPES = (
    "app_mentions:read",
    "chat:write",
    "commands",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "im:read",
    "users:read",
    "files:read",
    "files:write",
    "reactions:write",
)
SHELL_PLAN = 's2: shell: echo "hello from the sandbox" && uname -a\nconfirm'
SHELL_COMMAND = 'echo "hello from the sandbox" && uname -a'
CHANNEL = "C0GENERAL"
SLACK_ALICE = "U0AL1CE42"
GENERAL = "700000000000000001"
DISCORD_ALICE = "100000000000000001"


def _texts(value: Any) -> list[str]:
    """Every `text` string inside a Slack payload (its fallback text and its blocks)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return _texts(json.loads(value)) if value[:1] in "[{" else []
        return []
    if isinstance(value, dict):
        own = value.get("text")
        found = [own] if isinstance(own, str) else []
        # A section's `text` is an object with its own `text` (the mrkdwn people read).
        return found + [t for k, v in value.items() if not isinstance(v, str) for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _buttons(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


def _code_blocks(text: str) -> list[str]:
    return [block.strip("\n") for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.DOTALL)]


@dataclass
class Deployed:
    """The bot process and the two fakes it serves."""

    slack: FakeSlack
    discord: FakeDiscord
    proc: asyncio.subprocess.Process
    log: Path
    home: Path
    doctor: Result
    validated: dict[str, asyncio.Task[Result]]

    # -- Slack, as Alice in #general ---------------------------------------------------------

    async def slack_mention(self, text: str) -> str:
        """Alice mentions the bot in the channel; the thread's ts."""
        ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, SLACK_ALICE, f"<@UBOT> {text}", ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))
        return ts

    async def slack_reply(self, thread: str, text: str) -> None:
        """Alice answers in the thread (no mention)."""
        event = payloads.thread_message(CHANNEL, SLACK_ALICE, text, self.slack.next_ts(), thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def slack_posts(self, thread: str) -> list[dict[str, Any]]:
        """What the bot posted in a thread: each post's arguments and Slack's answer."""
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == thread
        ]

    async def slack_post(
        self, thread: str, cond: Callable[[dict[str, Any]], bool], n: int = 1
    ) -> dict[str, Any]:
        """Wait for the `n`th post in a thread that satisfies `cond`; return it."""
        await eventually(
            lambda: len([p for p in self.slack_posts(thread) if cond(p)]) >= n, within=WITHIN
        )
        return [p for p in self.slack_posts(thread) if cond(p)][n - 1]

    async def slack_click(self, thread: str, post: dict[str, Any], label: str) -> None:
        """Alice clicks the button `label` on a post."""
        button = next(b for b in _buttons(post) if b["text"]["text"] == label)
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            SLACK_ALICE,
            CHANNEL,
            post["ts"],
            thread_ts=thread,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)

    def slack_read(self) -> list[str]:
        """Everything people read in Slack: posts, edits and private notes."""
        methods = ("chat.postMessage", "chat.update", "chat.postEphemeral")
        return [
            text
            for call in self.slack.calls
            if call.method in methods and call.ok
            for text in _texts(call.args)
        ] + [t for post in self.slack.response_url_posts for t in _texts(post.json)]

    # -- Discord, as Alice in #general -------------------------------------------------------

    async def discord_mention(self, text: str) -> str:
        """Alice mentions the bot in #general; the thread started from it (its id)."""
        root = await self.discord.send_message(
            GENERAL, DISCORD_ALICE, f"<@{self.discord.bot_id}> {text}", mention_bot=True
        )
        return str(root["id"])

    async def discord_message(
        self, thread: str, cond: Callable[[dict[str, Any]], bool], n: int = 1
    ) -> dict[str, Any]:
        """Wait for the `n`th bot message in `thread` that satisfies `cond`; return it."""

        def matching() -> list[dict[str, Any]]:
            return [m for m in self.discord.bot_messages(thread) if cond(m)]

        await self.discord.wait_for(lambda: len(matching()) >= n, timeout=WITHIN)
        return matching()[n - 1]

    def discord_read(self) -> list[str]:
        """Everything people read in Discord: the bot's messages and its private answers."""
        contents = [m.get("content") or "" for m in self.discord.bot_messages()]
        answers = [c.get("data") or {} for c in self.discord.interaction_callbacks]
        answers += [f.get("message") or {} for f in self.discord.followups]
        return contents + [str(a.get("content") or "") for a in answers]


def _buttons_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployed]:
    root = tmp_path_factory.mktemp("readme-deployed")
    home = root / "raven-home"
    home.mkdir()
    (home / "agents.toml").write_text(AGENTS_TOML + "\n")
    (home / "permissions.toml").write_text(PERMISSIONS_TOML + "\n")
    toy, data = root / "toy", root / "imagenet"
    toy.mkdir()
    data.mkdir()
    machines = MACHINES_TOML.replace("/srv/projects/toy", str(toy))
    (home / "machines.toml").write_text(machines.replace("/data/imagenet", str(data)) + "\n")
    project = project_dir(root / "project")
    (project / "code.json").write_text(_graph("code", "write hello.py"))
    (project / "defaults.toml").write_text("# no agents of mine: the defaults\n")
    # The app installed from the manifest, as the README's step 1 says: with these scopes.
    async with FakeSlack(scopes=README_SCOPES) as slack, FakeDiscord() as discord:
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        discord.add_user(DISCORD_ALICE, "alice", global_name="Alice")
        env = slack_env(
            home,
            slack.api_url,
            DISCORD_TOKEN="discord-acceptance-token.abcdefghijklmnop",
            RAVEN_DISCORD_API_URL=discord.base_url,
            RAVEN_DISCORD_GATEWAY_URL=discord.gateway_url,
        )
        # `graph validate` reads no database: it runs meanwhile, in the background.
        validated = {
            command: asyncio.create_task(asyncio.to_thread(sh, command, env=env, cwd=project))
            for command in VALIDATIONS
        }
        doctor = await asyncio.to_thread(sh, ".venv/bin/raven-bot doctor", env=env, cwd=project)
        log = root / "raven-bot.log"
        try:
            async with serving(env, project, log) as proc:
                await slack.wait_connected(within=WITHIN)
                await discord.wait_ready(timeout=WITHIN)
                yield Deployed(slack, discord, proc, log, home, doctor, validated)
        finally:
            await asyncio.gather(*validated.values(), return_exceptions=True)


def _doctor_lines(out: str) -> dict[str, str]:
    """Each check of `doctor`'s output and its text."""
    return {
        m["check"]: m["text"]
        for m in re.finditer(
            r"^ *\[(?:ok  |WARN|FAIL)\] +(?P<check>\w+(?: \w+)?) {2,}(?P<text>.*)$",
            out,
            re.MULTILINE,
        )
    }


async def test_the_slack_manifest_is_what_step_1_says() -> None:
    # "paste `bot/slack/manifest.yaml`. It asks for the scopes the bot needs (…), subscribes
    # to `app_mention` and `message.*` events, enables interactivity and Socket Mode."
    try:
        manifest = yaml.safe_load((REPO / "bot" / "slack" / "manifest.yaml").read_text())
    except yaml.YAMLError as exc:
        pytest.fail(f"bot/slack/manifest.yaml is not YAML Slack can read: {exc}")
    assert sorted(manifest["oauth_config"]["scopes"]["bot"]) == sorted(README_SCOPES)
    settings = manifest["settings"]
    events = settings["event_subscriptions"]["bot_events"]
    assert "app_mention" in events and any(e.startswith("message.") for e in events), events
    assert settings["interactivity"]["is_enabled"] is True, settings
    assert settings["socket_mode_enabled"] is True, settings


async def test_doctor_accepts_the_configuration_and_checks_the_tokens(bot: Deployed) -> None:
    result = bot.doctor
    # "the exit code is non-zero only when a required check fails"; "Offline mode is a
    # warning, not a failure"
    assert result.code == 0, result.both
    assert "[FAIL]" not in result.out, result.out
    assert re.search(rf"RAVEN_HOME +{re.escape(str(bot.home))}", result.out), result.out
    # "one line per check (data dir, database, scheduler store, agents.toml, machines.toml,
    # permissions.toml, skills, unknown settings, libraries, embedder and recall mode, model,
    # each chat platform, channels, sandbox)"
    lines = _doctor_lines(result.out)
    checks = [
        *("data dir", "database", "scheduler store", "agents", "machines", "permissions"),
        *("skills", "settings", "libraries", "embedder", "model", "slack", "discord"),
        *("channels", "sandbox"),
    ]
    assert all(check in lines for check in checks), (set(checks) - set(lines), result.out)
    assert "offline" in lines["model"] and "MiniLM" in lines["embedder"], result.out
    agents = lines["agents"]
    assert str(bot.home / "agents.toml") in agents, agents
    assert "code" in agents and "reviewer" in agents and "my-review-tool" in agents, agents
    assert all(m in lines["machines"] for m in ("local", "gpu-box", "cluster")), result.out
    assert str(bot.home / "permissions.toml") in lines["permissions"], result.out
    assert "1 deny" in lines["permissions"], result.out
    # Slack: "checks the token with `auth.test` and lists missing scopes"; Discord: "checks
    # the token (`GET /users/@me`) and names the bot"
    assert bot.slack.calls_to("auth.test"), "doctor never called auth.test"
    assert re.search(r"^ *\[ok  \] +slack ", result.out, re.MULTILINE), result.out
    assert re.search(r"^ *\[ok  \] +discord ", result.out, re.MULTILINE), result.out
    assert bot.discord.bot_user["username"].lower() in lines["discord"].lower(), lines["discord"]


async def test_graph_validate_reads_agents_from_raven_home_or_the_given_file(
    bot: Deployed,
) -> None:
    refused, admitted = [await bot.validated[command] for command in VALIDATIONS]
    # RAVEN_HOME/agents.toml switches `code` off: "the first error (exit 2)" names it.
    assert refused.code == 2, refused.both
    assert "n1" in refused.out and "code" in refused.out and "disabled" in refused.out
    # `--agents FILE` reads that file instead (here: no agents of its own, the defaults).
    assert admitted.code == 0, admitted.both
    assert admitted.out.startswith("admitted"), admitted.out


def _is_prompt(post: dict[str, Any]) -> bool:
    return bool(_buttons(post))


async def test_slack_shell_plan_approved_by_button_then_by_typed_number(bot: Deployed) -> None:
    thread = await bot.slack_mention(SHELL_PLAN)
    plan = await bot.slack_post(thread, _is_prompt)
    assert SHELL_COMMAND in "\n".join(_texts(plan)), plan
    await bot.slack_click(thread, plan, "Approve")
    command = await bot.slack_post(thread, _is_prompt, n=2)
    # "the command is shown exactly, in a code block"
    assert SHELL_COMMAND in _code_blocks("\n".join(_texts(command))), command
    # "typing the option number in the thread works too"
    await bot.slack_reply(thread, "1")
    report = await bot.slack_post(thread, lambda p: "hello from the sandbox\n" in p["text"])
    assert "Linux" in report["text"], report["text"]


async def test_slack_scheduled_task_approved_by_button_then_run_now(bot: Deployed) -> None:
    thread = await bot.slack_mention("schedule: every 2h | s1: shell: df -h .")
    prompt = await bot.slack_post(thread, _is_prompt)
    # "the prompt shows the schedule, the next three fire times in the task's zone (named)
    # and exactly what each firing runs"
    shown = "\n".join(_texts(prompt))
    # The notification's fallback text, then the message's blocks.
    fallback, nexts = [line for line in shown.splitlines() if "Next:" in line]
    # Alice's Slack profile is in Europe/London: her schedule is, without a `tz:`.
    assert "every 2h (Europe/London)" in shown and nexts.count(" GMT") == 3, shown
    # Each reader's Slack shows the times in their own zone too (Slack's own date token).
    assert nexts.count("<!date^") == 3 and nexts.count("your time)") == 3, nexts
    assert fallback.count(" GMT") == 3 and "\u27e8" not in fallback, fallback
    assert "df -h ." in shown, shown
    await bot.slack_click(thread, prompt, "Approve")
    scheduled = await bot.slack_post(thread, lambda p: "is scheduled: every 2h" in p["text"])
    task = re.findall(r"t_[0-9a-f]{8}", scheduled["text"])[0]
    # Run now: the command approved with the task runs without another approval.
    await bot.slack_reply(thread, f"schedule: run {task}")
    await bot.slack_post(thread, lambda p: "Filesystem" in p["text"])
    assert len([p for p in bot.slack_posts(thread) if _is_prompt(p)]) == 1
    await bot.slack_reply(thread, "status")
    status = await bot.slack_post(thread, lambda p: "Scheduled tasks" in p["text"])
    assert task in status["text"] and "Next" in status["text"], status["text"]
    # Slack draws the tasks as a table block; the text above stays the notification.
    blocks = status.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    assert any(b["type"] == "table" for b in blocks), status
    assert "<!date^" in status["text"], status["text"]
    assert not any("\u27e8t:" in p["text"] for p in bot.slack_posts(thread))  # no raw marks
    await bot.slack_reply(thread, f"schedule: cancel {task}")
    await bot.slack_post(thread, lambda p: f"{task}` is cancelled" in p["text"])


async def test_slack_standing_check_trips_and_says_so_once(bot: Deployed) -> None:
    thread = await bot.slack_mention(
        "watch: every 30m | check: curl -fsS http://localhost:8080/health"
    )
    prompt = await bot.slack_post(thread, _is_prompt)
    assert "without a model" in "\n".join(_texts(prompt)), prompt
    await bot.slack_click(thread, prompt, "Approve")
    scheduled = await bot.slack_post(thread, lambda p: "is scheduled: every 30m" in p["text"])
    task = re.findall(r"t_[0-9a-f]{8}", scheduled["text"])[0]
    await bot.slack_reply(thread, f"schedule: run {task}")
    await bot.slack_post(thread, lambda p: "tripped: its command exited with" in p["text"])
    await bot.slack_reply(thread, f"schedule: run {task}")
    # A run now within the minimum interval of the last one is refused, naming the limit.
    await bot.slack_post(thread, lambda p: "RAVEN_SCHEDULE_MIN_INTERVAL" in p["text"])
    assert len([p for p in bot.slack_posts(thread) if "tripped" in p["text"]]) == 1


async def test_slack_post_channel_starts_a_thread_per_firing(bot: Deployed) -> None:
    thread = await bot.slack_mention(
        "schedule: every 2h | t1: shell: echo in-a-thread-of-its-own | post: channel"
    )
    prompt = await bot.slack_post(thread, _is_prompt)
    await bot.slack_click(thread, prompt, "Approve")
    scheduled = await bot.slack_post(thread, lambda p: "is scheduled: every 2h" in p["text"])
    task = re.findall(r"t_[0-9a-f]{8}", scheduled["text"])[0]
    await bot.slack_reply(thread, f"schedule: run {task}")

    def headlines() -> list[dict[str, Any]]:
        return [
            {**c.args, "ts": c.response.get("ts")}
            for c in bot.slack.calls_to("chat.postMessage")
            if c.ok and not c.args.get("thread_ts") and task in str(c.args.get("text"))
        ]

    await eventually(lambda: len(headlines()) == 1, within=WITHIN)
    (headline,) = headlines()

    # The firing's result is in the new thread, not in the one that scheduled it.
    def result(post: dict[str, Any]) -> bool:
        return "Output of" in post["text"] and "in-a-thread-of-its-own" in post["text"]

    await bot.slack_post(headline["ts"], result)
    assert not [p for p in bot.slack_posts(thread) if result(p)]


async def test_slack_help(bot: Deployed) -> None:
    thread = await bot.slack_mention("help")
    shown = (await bot.slack_post(thread, lambda p: True))["text"]
    for word in ("stop", "status", "id: agent: task", "confirm", "campaign:", "remember"):
        assert word in shown, (word, shown)


async def test_slack_stop_during_a_running_plan(bot: Deployed) -> None:
    thread = await bot.slack_mention("w1: shell: sleep 619")
    command = await bot.slack_post(thread, _is_prompt)
    assert "sleep 619" in _code_blocks("\n".join(_texts(command))), command
    await bot.slack_click(thread, command, "Approve")
    await eventually(lambda: running("sleep", "619"), within=WITHIN)
    await bot.slack_reply(thread, "stop")
    stopped = (await bot.slack_post(thread, lambda p: "Stopped" in p["text"]))["text"]
    assert "nothing" not in stopped, stopped
    assert re.search(r"run `?run_\w+`? \(w1 cancelled\)", stopped), stopped
    await eventually(lambda: not running("sleep", "619"), within=WITHIN)


async def test_discord_shell_plan_approved_by_typed_number_then_by_button(bot: Deployed) -> None:
    thread = await bot.discord_mention(SHELL_PLAN)
    plan = await bot.discord_message(thread, lambda m: bool(_buttons_of(m)))
    assert SHELL_COMMAND in plan["content"], plan
    await bot.discord.send_message(thread, DISCORD_ALICE, "1")
    command = await bot.discord_message(thread, lambda m: bool(_buttons_of(m)), n=2)
    assert SHELL_COMMAND in _code_blocks(command["content"]), command["content"]
    approve = next(b for b in _buttons_of(command) if b.get("label") == "Approve")
    await bot.discord.click(thread, command["id"], approve["custom_id"], DISCORD_ALICE)
    report = await bot.discord_message(
        thread, lambda m: "hello from the sandbox\n" in (m.get("content") or "")
    )
    assert "Linux" in report["content"], report["content"]
    # "a decided prompt's message shows the outcome with its buttons disabled"
    for prompt in (plan, command):

        def decided_prompt(message: dict[str, Any], id: str = prompt["id"]) -> bool:
            buttons = _buttons_of(message)
            return message["id"] == id and bool(buttons) and all(b.get("disabled") for b in buttons)

        decided = await bot.discord_message(thread, decided_prompt)
        assert "Approve" in decided["content"] and "Alice" in decided["content"], decided


async def test_discord_help(bot: Deployed) -> None:
    thread = await bot.discord_mention("help")
    shown = (await bot.discord_message(thread, lambda m: "stop" in (m.get("content") or "")))[
        "content"
    ]
    for word in ("stop", "status", "id: agent: task", "confirm", "campaign:", "remember"):
        assert word in shown, (word, shown)
    # All of it in one message: Discord cuts at 2,000 characters, and a second part would
    # start mid-list (it ends with the plan example).
    assert shown.rstrip().endswith("```"), shown
    assert len(bot.discord.bot_messages(thread)) == 1


async def test_the_configuration_does_what_it_says(bot: Deployed) -> None:
    # agents.toml: `echo *` is on the shell allow list (runs unasked), `code` is switched
    # off, and `reviewer` has no binary here.
    thread = await bot.slack_mention("l1: shell: echo allowed by the list")
    report = await bot.slack_post(thread, lambda p: "allowed by the list\n" in p["text"] + "\n")
    assert "Output of" in report["text"], report
    assert not any(_is_prompt(p) for p in bot.slack_posts(thread)), bot.slack_posts(thread)
    for agent in ("code", "reviewer"):
        thread = await bot.slack_mention(f"x1: {agent}: do the work")
        refused = await bot.slack_post(thread, lambda p: "disabled" in p["text"])
        assert re.search(rf"agent `?{agent}`? is disabled", refused["text"]), refused["text"]


@pytest.mark.parametrize("platform", ["slack", "discord"])
async def test_what_people_read_is_clean(bot: Deployed, platform: str) -> None:
    read = bot.slack_read() if platform == "slack" else bot.discord_read()
    assert read, "nothing was read"
    raw = (SLACK_ALICE,) if platform == "slack" else (DISCORD_ALICE,)
    found = [line for text in read for line in noise(text, raw)]
    if platform == "slack":  # `doctor`, in a terminal: both streams are read
        found += [f"[doctor] {line}" for line in noise(bot.doctor.both)]
    assert not found, "\n".join(found[:20])
