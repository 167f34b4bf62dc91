"""A team thread, as a team uses the bot (issue 39): the real `raven-bot run` serving Slack
(Socket Mode) and Discord at once against the loopback fakes, with default settings and no
model key. Alice asks; Bob, a bystander, chats in her thread. The bot answers Alice's
follow-ups without a re-mention and gives Bob's chatter nothing; a typo gets "did you mean",
a stray answer "no question is waiting"; command output comes back verbatim (Markdown-hostile
text, 100,000 lines as their head and tail); a denied command is "not approved"; a campaign
of 15 rounds inside one hour shows every round's news, nothing dropped. Assertions are on
the exact payloads posted (Slack's text and blocks, Discord's content)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.acceptance.harness import WITHIN, project_dir, serving, slack_env
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import db_rows, eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

CHANNEL = "C0GENERAL"
SLACK_ALICE, SLACK_BOB = "U0AL1CE42", "U0B0B0042"
GENERAL = "700000000000000001"
DISCORD_ALICE, DISCORD_BOB = "100000000000000001", "100000000000000002"

# Output every markup would misread: emphasis, a quote, a heading, aligned columns.
HOSTILE = "printf '*PASSED* 3 _of_ 5\\n> note\\n# FAILED tests\\nname   size\\nab     10\\n'"
HOSTILE_OUTPUT = "*PASSED* 3 _of_ 5\n> note\n# FAILED tests\nname   size\nab     10"


def _blocks(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks") or []
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks)


def _buttons(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in _blocks(args) if b.get("type") == "actions" for e in b.get("elements", [])]


def _discord_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


@dataclass
class Team:
    """The bot process and the two fakes it serves, with Alice and Bob in #general."""

    slack: FakeSlack
    discord: FakeDiscord
    home: Path
    log: Path

    # -- Slack -------------------------------------------------------------------------------

    async def slack_mention(self, user: str, text: str) -> str:
        ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, user, f"<@UBOT> {text}", ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))
        return ts

    async def slack_say(self, thread: str, user: str, text: str) -> None:
        """`user` writes in the thread without mentioning the bot."""
        event = payloads.thread_message(CHANNEL, user, text, self.slack.next_ts(), thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def slack_posts(self, thread: str) -> list[dict[str, Any]]:
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == thread
        ]

    async def slack_after(
        self, thread: str, seen: int, cond: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """The first post in the thread after its first `seen` that satisfies `cond`."""

        def found() -> list[dict[str, Any]]:
            return [p for p in self.slack_posts(thread)[seen:] if cond(p)]

        await eventually(found, within=WITHIN)
        return found()[0]

    async def slack_click(self, thread: str, post: dict[str, Any], label: str, user: str) -> None:
        button = next(b for b in _buttons(post) if b["text"]["text"] == label)
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            user,
            CHANNEL,
            post["ts"],
            thread_ts=thread,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)

    # -- Discord -----------------------------------------------------------------------------

    async def discord_mention(self, user: str, text: str) -> str:
        root = await self.discord.send_message(
            GENERAL, user, f"<@{self.discord.bot_id}> {text}", mention_bot=True
        )
        return str(root["id"])

    async def discord_say(self, thread: str, user: str, text: str) -> None:
        await self.discord.send_message(thread, user, text)

    async def discord_after(
        self, thread: str, seen: int, cond: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """The first bot message in the thread after its first `seen` that satisfies `cond`."""

        def found() -> list[dict[str, Any]]:
            return [m for m in self.discord.bot_messages(thread)[seen:] if cond(m)]

        await self.discord.wait_for(lambda: bool(found()), timeout=WITHIN)
        return found()[0]

    async def discord_click(
        self, thread: str, message: dict[str, Any], label: str, user: str
    ) -> None:
        button = next(b for b in _discord_buttons(message) if b.get("label") == label)
        await self.discord.click(thread, message["id"], button["custom_id"], user)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def team(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Team]:
    root = tmp_path_factory.mktemp("team-thread")
    home = root / "raven-home"
    home.mkdir()
    project = project_dir(root / "project")
    async with FakeSlack() as slack, FakeDiscord() as discord:
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        slack.add_user(SLACK_BOB, "bob", real_name="Bob Hope", display_name="bob")
        discord.add_user(DISCORD_ALICE, "alice", global_name="Alice")
        discord.add_user(DISCORD_BOB, "bob", global_name="Bob")
        env = slack_env(
            home,
            slack.api_url,
            DISCORD_TOKEN="discord-acceptance-token.abcdefghijklmnop",
            RAVEN_DISCORD_API_URL=discord.base_url,
            RAVEN_DISCORD_GATEWAY_URL=discord.gateway_url,
        )
        log = root / "raven-bot.log"
        async with serving(env, project, log):
            await slack.wait_connected(within=WITHIN)
            await discord.wait_ready(timeout=WITHIN)
            yield Team(slack, discord, home, log)


def _has(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda post: text in str(post.get("text"))


def _prompt(post: dict[str, Any]) -> bool:
    return bool(_buttons(post))


def _plain(text: str) -> str:
    """`text` with the ids a run gives out (run and prompt ids, expiry times) named."""
    text = re.sub(r"run_[0-9a-f]{10}", "RUN", text)
    text = re.sub(r"prompt `[0-9a-f]{8}`", "prompt `ID`", text)
    return re.sub(r"<(?:!date\^|t:)\d+[^>]*>", "<EXPIRY>", text)


def _is_status(text: str) -> bool:
    """A run's live status message (edited while it runs: its text depends on when it was
    posted), told apart from its report by the missing end state."""
    return bool(re.match(r"\*{1,2}Run `RUN`\*{1,2} —", text))


OFFLINE_JUDGE = (
    "No model checked these results (offline mode): a node counts as done when its agent "
    "returned without an error."
)
RECORD = "Full record: `raven-bot runs show RUN` on the bot's host."
LONG_OUTPUT = "\n".join(
    [*map(str, range(1, 11)), "… 99,960 lines omitted …", *map(str, range(99971, 100001))]
)
SANDBOX = (
    "- Runs in: this conversation's workspace, on the bot's host, with a time limit\n"
    "- It can see: the system read-only, the workspace as the only writable path, a fresh "
    "`/tmp` and `$HOME`; not `RAVEN_HOME` (database, runs, other workspaces), not the bot's "
    "working directory (`.env`) and nothing of the bot's environment. The network is not cut "
    "off.\n"
)


def _asked(node: str, command: str) -> str:
    """A shell command's approval prompt, as Markdown."""
    return (
        f"The `{node}` node wants to run this command in its sandboxed workspace:\n"
        f"```\n{command}\n```\n{SANDBOX}"
    )


def _report(node: str, output: str) -> str:
    return (
        f"**Run `RUN` completed** — Explicit plan: {node} (shell)\nNodes: 1 completed.\n"
        f"- ✅ `{node}` (shell) completed\n\n**Output of `{node}`**:\n```\n{output}\n```\n\n"
        f"{OFFLINE_JUDGE}\n{RECORD}"
    )


DENIED = (
    "**Run `RUN` not approved** — Explicit plan: o3 (shell)\nNodes: 1 failed.\n"
    "- ⛔ `o3` (shell) *not approved* — error below\n\n**Errors**:\n"
    "- `o3`: Command not approved by the requester: 'rm -rf ./scratch'\n\n" + RECORD
)
STARTED = "Started run `RUN` with 1 step; I'll post the report here."
# The whole of a shortened output comes as a file after its report.
ATTACHED = "\n\n📎 Attached to this thread: `o2-output.md`."
TYPO = "Did you mean `status`?"
STRAY = "No question is waiting for you here."


def _slack(markdown: str) -> str:
    """What the Slack adapter makes of the bot's Markdown (emphasis, bullets, `>` escaped)."""
    text = markdown.replace("*not approved*", "_not approved_")
    text = text.replace("**", "*").replace("\n- ", "\n• ")
    return text.replace("> note", "&gt; note")


def _thread_says(texts: list[str]) -> list[str]:
    """The thread's posts, ids named, live status messages left out."""
    return [t for t in map(_plain, texts) if not _is_status(t)]


def _bob_got_nothing(team: Team, bob: str) -> None:
    """Bob's chatter is recorded and handled, and no turn ever ran for it."""
    handled = db_rows(
        team.home, "SELECT handled FROM messages WHERE direction = 'in' AND author_id = ?", bob
    )
    assert handled == [(1,)], handled
    assert db_rows(team.home, "SELECT id FROM turns WHERE author_id = ?", bob) == []


async def test_slack_team_thread(team: Team) -> None:
    thread = await team.slack_mention(SLACK_ALICE, f"o1: shell: {HOSTILE}")
    prompt = await team.slack_after(thread, 0, _prompt)
    section, actions, context = _blocks(prompt)
    assert section["text"]["text"] == _slack(
        _asked("o1", HOSTILE.replace(">", "&gt;")) + "  Exactly this command runs. Run it?"
    )
    assert [b["text"]["text"] for b in actions["elements"]] == ["Approve", "Deny"]
    assert _plain(context["elements"][0]["text"]) == (
        "Only alice or an approver can answer · expires <EXPIRY> · or reply in this thread "
        "with the option number"
    )
    await team.slack_click(thread, prompt, "Approve", SLACK_ALICE)
    await team.slack_after(thread, 0, _has("Nodes:"))

    # Bob chats; Alice follows up without a mention: a typo, then a stray answer.
    seen = len(team.slack_posts(thread))
    await team.slack_say(thread, SLACK_BOB, "nice, thanks!")
    await team.slack_say(thread, SLACK_ALICE, "stauts")
    await team.slack_after(thread, seen, _has(TYPO))
    await team.slack_say(thread, SLACK_ALICE, "1")
    await team.slack_after(thread, seen, _has(STRAY))

    await team.slack_say(thread, SLACK_ALICE, "o2: shell: seq 1 100000")
    seen = len(team.slack_posts(thread))
    await team.slack_after(thread, seen - 1, _prompt)
    await team.slack_say(thread, SLACK_ALICE, "1")  # answers the prompt waiting for her
    await team.slack_after(thread, seen, _has("Nodes:"))

    await team.slack_say(thread, SLACK_ALICE, "o3: shell: rm -rf ./scratch")
    seen = len(team.slack_posts(thread))
    prompt = await team.slack_after(thread, seen - 1, _prompt)
    await team.slack_click(thread, prompt, "Deny", SLACK_BOB)  # a bystander: refused
    (note,) = await team.slack.wait_for_call("chat.postEphemeral", within=WITHIN)
    assert note.args["user"] == SLACK_BOB
    assert note.args["text"] == "Only alice or an approver can answer this."
    await team.slack_click(thread, prompt, "Deny", SLACK_ALICE)
    await team.slack_after(thread, seen, _has("not approved*"))

    texts = [str(p.get("text")) for p in team.slack_posts(thread)]
    prompts = [str(p.get("text")) for p in team.slack_posts(thread) if _prompt(p)]
    assert _thread_says(texts) == [
        STARTED,
        _plain(prompts[0]),
        _slack(_report("o1", HOSTILE_OUTPUT)),
        TYPO,
        STRAY,
        STARTED,
        _plain(prompts[1]),
        "✔ Answered prompt `ID` (The `o2` node wants to run this command in its sandboxed "
        "workspace) with Approve.",
        _slack(_report("o2", LONG_OUTPUT) + ATTACHED),
        STARTED,
        _plain(prompts[2]),
        _slack(DENIED),
    ]
    _bob_got_nothing(team, SLACK_BOB)
    # Blocks only where they draw something text cannot: buttons, and the live status
    # message's one row per node.
    blocked = [p for p in team.slack_posts(thread) if p.get("blocks") and not _prompt(p)]
    assert blocked and all(_is_status(_plain(str(p.get("text")))) for p in blocked)
    for post in blocked:
        (table,) = [b for b in post["blocks"] if b["type"] == "table"]
        assert [c["text"] for c in table["rows"][0]] == ["Node", "Task", "State"]


def _content(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda message: text in str(message.get("content"))


def _discord_prompt(message: dict[str, Any]) -> bool:
    return bool(_discord_buttons(message))


async def test_discord_team_thread(team: Team) -> None:
    thread = await team.discord_mention(DISCORD_ALICE, f"o1: shell: {HOSTILE}")
    prompt = await team.discord_after(thread, 0, _discord_prompt)
    assert _plain(prompt["content"]) == (
        _asked("o1", HOSTILE) + "Exactly this command runs. Run it?\n-# Only Alice or an "
        "approver can answer · expires <EXPIRY> · or reply in this thread with the option number"
    )
    assert [b["label"] for b in _discord_buttons(prompt)] == ["Approve", "Deny"]
    await team.discord_click(thread, prompt, "Approve", DISCORD_ALICE)
    await team.discord_after(thread, 0, _content("Nodes:"))

    seen = len(team.discord.bot_messages(thread))
    await team.discord_say(thread, DISCORD_BOB, "nice, thanks!")
    await team.discord_say(thread, DISCORD_ALICE, "stauts")
    await team.discord_after(thread, seen, _content(TYPO))
    await team.discord_say(thread, DISCORD_ALICE, "1")
    await team.discord_after(thread, seen, _content(STRAY))

    await team.discord_say(thread, DISCORD_ALICE, "o2: shell: seq 1 100000")
    seen = len(team.discord.bot_messages(thread))
    await team.discord_after(thread, seen - 1, _discord_prompt)
    await team.discord_say(thread, DISCORD_ALICE, "1")
    await team.discord_after(thread, seen, _content("Nodes:"))

    await team.discord_say(thread, DISCORD_ALICE, "o3: shell: rm -rf ./scratch")
    seen = len(team.discord.bot_messages(thread))
    prompt = await team.discord_after(thread, seen - 1, _discord_prompt)
    await team.discord_click(thread, prompt, "Deny", DISCORD_BOB)
    await team.discord.wait_for(lambda: bool(team.discord.followups), timeout=WITHIN)
    (refusal,) = team.discord.followups
    assert refusal["payload"] == {
        "content": "Only Alice or an approver can answer this.",
        "tts": False,
        "flags": 64,  # ephemeral: only Bob sees it
        "allowed_mentions": {"parse": []},
    }
    await team.discord_click(thread, prompt, "Deny", DISCORD_ALICE)
    await team.discord_after(thread, seen, _content("not approved**"))

    asked = "Exactly this command runs. Run it?\n"
    # A message carrying only a file has no text (it may come after the next run started).
    contents = [str(m.get("content")) for m in team.discord.bot_messages(thread)]
    assert [a.filename for a in team.discord.attachments_in(thread)] == ["o2-output.md"]
    assert _thread_says([c for c in contents if c]) == [
        STARTED,
        _asked("o1", HOSTILE) + asked + "✅ **Approve** — answered by Alice",
        _report("o1", HOSTILE_OUTPUT),
        TYPO,
        STRAY,
        STARTED,
        _asked("o2", "seq 1 100000") + asked + "✅ **Approve** — answered by Alice",
        "✔ Answered prompt `ID` (The `o2` node wants to run this command in its sandboxed "
        "workspace) with Approve.",
        _report("o2", LONG_OUTPUT) + ATTACHED,
        STARTED,
        _asked("o3", "rm -rf ./scratch") + asked + "🚫 **Deny** — answered by Alice",
        DENIED,
    ]
    _bob_got_nothing(team, DISCORD_BOB)
    for message in team.discord.bot_messages(thread):
        assert message["allowed_mentions"] == {"parse": []} or not message.get("mentions")


# Fifteen rounds, each a second or so: the counter file `n` in the conversation's workspace
# (the default `local` machine's workdir) makes each round's loss one lower.
FIFTEEN_ROUNDS = (
    "campaign: fifteen quick rounds | machine: local | "
    'run: n=$(cat n 2>/dev/null); n=$((n+1)); echo $n > n; echo "loss $((100-n))" | '
    "metric: loss min | budget: 1h | rounds: 15 | baseline: 100 | poll: 1s"
)


def _campaign(text: str) -> str:
    """`text` with the campaign's id and its rounds' job ids named."""
    text = re.sub(r"cmp_[0-9a-f]{10}", "CMP", _plain(text))
    return re.sub(r"job `\d+:\d+`", "job `JOB`", text)


def _rounds_shown(versions: list[str]) -> dict[int, set[str]]:
    """For each round, what the status message said of it over its versions."""
    shown: dict[int, set[str]] = {}
    for text in versions:
        if found := re.match(r"(?:▶️|🏁) Campaign `CMP` round (\d+)/15 (running|finished)", text):
            shown.setdefault(int(found[1]), set()).add(found[2])
        for event in re.findall(r"Woke early: round (\d+) finished", text):
            shown.setdefault(int(event), set()).add("woke early")
        for event in re.findall(r"so I am starting round (\d+)", text):
            shown.setdefault(int(event), set()).add("resubmitted")
    return shown


EVERY_ROUND = {
    1: {"running", "finished", "woke early"},
    **{n: {"running", "finished", "woke early", "resubmitted"} for n in range(2, 16)},
}
CAMPAIGN_STARTED = (
    "🛰️ Campaign `CMP` started: fifteen quick rounds\nMachine `local`, metric `loss` (min), "
    "budget 1h and 15 round(s). I watch it without model calls and report here."
)
FIRST_STATUS = "▶️ Campaign `CMP` round 1/15 running on `local` (job `JOB`): latest none yet."
LAST_STATUS = (
    "🏁 Campaign `CMP` round 15/15 finished (exit code 0): latest loss=85 (#15).\n"
    "🔔 Woke early: round 14 finished (exit code 0).\n"
    "🔁 Resubmitting: Round 14 finished with a new best (best loss=86, measurement #14), so I "
    "am starting round 15 (cites #14).\n"
    "🔔 Woke early: round 15 finished (exit code 0)."
)
CAMPAIGN_REPORT = (
    "📋 Campaign `CMP` report:\n\n"
    "The campaign finished after round 15: the round budget is used up (15 of 15 rounds).\n"
    "Baseline loss: 100 (the campaign's recorded baseline).\n"
    "Best loss: 85 (measurement #15, round 15); lower is better.\n"
    "Last loss: 85 (measurement #15, round 15).\n"
    "Rounds: rounds 1–15 finished (exit code 0).\n"
)
WAITING = (
    "Campaign `CMP` is waiting for approval: nothing runs until you, an approver or an admin "
    "approve its command."
)


def _campaign_posts(texts: list[str]) -> list[str]:
    """The campaign thread's posts, ids named; the report's budget line (times) cut."""
    return [_campaign(t).split("Budget used:")[0] for t in texts]


async def test_slack_campaign_of_fifteen_rounds_shows_every_round(team: Team) -> None:
    thread = await team.slack_mention(SLACK_ALICE, FIFTEEN_ROUNDS)
    prompt = await team.slack_after(thread, 0, _prompt)
    await team.slack_click(thread, prompt, "Approve", SLACK_ALICE)
    await team.slack_after(thread, 0, _has("report:"))
    posts = team.slack_posts(thread)
    status = next(p for p in posts if "round 1/15" in str(p.get("text")))
    assert _campaign_posts([str(p.get("text")) for p in posts]) == [
        _campaign(str(prompt.get("text"))),
        WAITING,
        CAMPAIGN_STARTED,
        FIRST_STATUS,
        CAMPAIGN_REPORT,
    ]
    # Every round's news is in the one status message, edited in place: nothing dropped,
    # nothing held back, no post per round.
    # The message as posted counts too (as on Discord): round 1 may finish before any edit.
    versions = [_campaign(str(status.get("text")))] + [
        _campaign(str(c.args.get("text")))
        for c in team.slack.calls_to("chat.update")
        if c.ok and c.args.get("ts") == status["ts"]
    ]
    assert _rounds_shown(versions) == EVERY_ROUND
    assert versions[-1] == LAST_STATUS
    # The report's rounds are a table block: the header and one row per round.
    report = next(p for p in posts if "report:" in str(p.get("text")))
    blocks = report.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    (table,) = [b for b in blocks if b["type"] == "table"]
    assert [row[0].get("text") for row in table["rows"][1:]] == [str(n) for n in range(1, 16)]
    assert "Runs in: this conversation's workspace, on the bot's host" in prompt["text"]
    assert str(team.home) not in json.dumps(prompt)


async def test_discord_campaign_of_fifteen_rounds_shows_every_round(team: Team) -> None:
    thread = await team.discord_mention(DISCORD_ALICE, FIFTEEN_ROUNDS)
    prompt = await team.discord_after(thread, 0, _discord_prompt)
    await team.discord_say(thread, DISCORD_ALICE, "1")  # a typed approval this time
    await team.discord_after(thread, 0, _content("report:"))
    messages = team.discord.bot_messages(thread)
    status = next(m for m in messages if "round 15/15" in str(m.get("content")))
    said = _campaign_posts([str(m.get("content")) for m in messages])
    assert said[1:] == [
        WAITING,
        "✔ Answered prompt `ID` (Start campaign `CMP` (fifteen quick rounds) with this "
        "command?) with Approve.",
        CAMPAIGN_STARTED,
        LAST_STATUS,
        CAMPAIGN_REPORT,
    ]
    assert said[0].startswith("Start campaign `CMP` (fifteen quick rounds) with this command?")
    # The report's rounds are embed fields, one per round.
    report = next(m for m in messages if "report:" in str(m.get("content")))
    fields = [f for e in report["embeds"] for f in e["fields"]]
    assert [f["name"] for f in fields] == [str(n) for n in range(1, 16)]
    assert [b["label"] for b in _discord_buttons(prompt)] == ["Approve", "Deny"]
    posted = [
        _campaign(str((r.json or {}).get("content")))
        for r in team.discord.requests_to("POST", f"/channels/{thread}/messages")
        if "round 1/15" in str((r.json or {}).get("content"))
    ]
    assert posted == [FIRST_STATUS]
    edits = team.discord.requests_to("PATCH", f"/channels/{thread}/messages/{status['id']}")
    versions = posted + [_campaign(str((r.json or {}).get("content"))) for r in edits]
    assert _rounds_shown(versions) == EVERY_ROUND
