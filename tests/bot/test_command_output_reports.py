"""Command output in run reports, as posted on Slack and Discord through the real shell agent:
verbatim in a code block (nothing the markup would interpret, no ping), a long output's head
and tail with the omitted line count, no host path, and a denied command as not approved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.render.split import ZWSP
from tests.discord_harness import ALICE, DiscordBot, discord_bot
from tests.discord_harness import buttons as discord_buttons
from tests.helpers import eventually
from tests.slack_harness import SlackBot, buttons, slack_bot

# Markdown-hostile output: emphasis, a quote, a heading, pings and a fence of its own.
PRINTF = r"printf '*PASSED* 3 _of_ 5\n> note\n# FAILED tests\n@everyone <!channel>\n```\n'"
OFFLINE_NOTE = (
    "No model checked these results (offline mode): a node counts as done when its agent "
    "returned without an error."
)
SEQ_HEAD = [str(n) for n in range(1, 11)]
SEQ_TAIL = [str(n) for n in range(99_971, 100_001)]
_RUN = re.compile(r"run_[0-9a-f]{10}")


def _typed_on_slack(text: str) -> str:
    """What Slack sends for `text` typed in a message: `&`, `<` and `>` as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- Slack ------------------------------------------------------------------------------------


async def _slack_plan(bot: SlackBot, line: str, *, approve: bool) -> tuple[str, str]:
    """Mention the bot with a one-line plan, answer its prompt; (thread, report text)."""
    thread, _ = await bot.mention(_typed_on_slack(line))
    await eventually(lambda: any(p.get("blocks") for p in bot.posts(thread)))
    (prompt,) = [p for p in bot.posts(thread) if p.get("blocks")]
    prompt_ts = next(
        c.response["ts"]
        for c in bot.fake.calls_to("chat.postMessage")
        if c.ok and c.args.get("blocks") and c.args.get("thread_ts") == thread
    )
    await bot.click(buttons(prompt)[0 if approve else 1], "U1", thread, prompt_ts)
    await eventually(lambda: any(_is_report(p["text"]) for p in bot.posts(thread)), 60)
    await bot.settle(thread)
    (report,) = [p["text"] for p in bot.posts(thread) if _is_report(p["text"])]
    return thread, report


def _is_report(text: str) -> bool:
    return "\nNodes: " in text


def _no_host_path(bot: SlackBot | DiscordBot, texts: list[str]) -> None:
    home = str(bot.runtime.settings.home)
    for text in texts:
        assert home not in text and "Records:" not in text, text


async def test_slack_shows_command_output_verbatim_in_a_code_block(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        thread, report = await _slack_plan(bot, f"s1: shell: {PRINTF}", approve=True)
        run = _RUN.findall(report)[0]
        assert report == "\n".join(
            [
                f"*Run `{run}` completed* — Explicit plan: s1 (shell)",
                "Nodes: 1 completed.",
                "• ✅ `s1` (shell) completed",
                "",
                "*Output of `s1`*:",
                "```",
                "*PASSED* 3 _of_ 5",
                "&gt; note",
                "# FAILED tests",
                f"@{ZWSP}everyone &lt;!channel&gt;",
                f"`{ZWSP}`{ZWSP}`",
                "```",
                "",
                OFFLINE_NOTE,
                f"Full record: `raven-bot runs show {run}` on the bot's host.",
            ]
        )
        _no_host_path(bot, [p["text"] for p in bot.posts(thread)])


async def test_slack_shows_the_tail_of_a_long_output(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        thread, report = await _slack_plan(bot, "s1: shell: seq 1 100000", approve=True)
        run = _RUN.findall(report)[0]
        assert report == "\n".join(
            [
                f"*Run `{run}` completed* — Explicit plan: s1 (shell)",
                "Nodes: 1 completed.",
                "• ✅ `s1` (shell) completed",
                "",
                "*Output of `s1`*:",
                "```",
                *SEQ_HEAD,
                "… 99,960 lines omitted …",
                *SEQ_TAIL,
                "```",
                "",
                OFFLINE_NOTE,
                f"Full record: `raven-bot runs show {run}` on the bot's host.",
                "",
                "📎 Attached to this thread: `s1-output.md`.",
            ]
        )
        _no_host_path(bot, [p["text"] for p in bot.posts(thread)])
        # The whole output arrives as a file, after the report.
        (shared,) = await bot.fake.wait_for_files(1, within=30)
        assert (shared.name, shared.thread_ts) == ("s1-output.md", thread)
        assert b"\n5000\n" in shared.data and shared.data.endswith(b"\n100000")


async def test_slack_reports_a_denied_command_as_not_approved(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        _, report = await _slack_plan(bot, "s1: shell: seq 1 3", approve=False)
        run = _RUN.findall(report)[0]
        assert report == "\n".join(
            [
                f"*Run `{run}` not approved* — Explicit plan: s1 (shell)",
                "Nodes: 1 failed.",
                "• ⛔ `s1` (shell) _not approved_ — error below",
                "",
                "*Errors*:",
                "• `s1`: Command not approved by the requester: 'seq 1 3'",
                "",
                f"Full record: `raven-bot runs show {run}` on the bot's host.",
            ]
        )
        # The run's status message says so too, and shows the command as typed.
        calls = [*bot.fake.calls_to("chat.postMessage"), *bot.fake.calls_to("chat.update")]
        status = [
            c.args["text"]
            for c in sorted(calls, key=lambda c: c.at)
            if c.ok and c.args["text"].startswith(f"*Run `{run}`*")
        ]
        assert status[-1] == "\n".join(
            [
                f"*Run `{run}`* — Explicit plan: s1 (shell)",
                "1/1 settled",
                "• ⛔ `s1` `seq 1 3`: _not approved_",
            ]
        )


# -- Discord ----------------------------------------------------------------------------------


async def _discord_plan(bot: DiscordBot, line: str, *, approve: bool) -> tuple[str, list[str]]:
    """Mention the bot with a one-line plan, answer its prompt; (thread, the report's
    messages)."""
    root = await bot.mention(line)
    thread = str(root["id"])
    await bot.fake.wait_for(lambda: any(discord_buttons(m) for m in bot.fake.bot_messages(thread)))
    (prompt,) = [m for m in bot.fake.bot_messages(thread) if discord_buttons(m)]
    button = discord_buttons(prompt)[0 if approve else 1]
    await bot.fake.click(thread, prompt["id"], button["custom_id"], ALICE)
    await bot.fake.wait_for(lambda: any(_is_report(t) for t in bot.texts(thread)), 60)
    await bot.settle(thread)
    texts = bot.texts(thread)
    start = next(i for i, t in enumerate(texts) if _is_report(t))
    return thread, texts[start:]


async def test_discord_shows_command_output_verbatim_and_the_tail_of_a_long_one(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread, report = await _discord_plan(bot, f"s1: shell: {PRINTF}", approve=True)
        run = _RUN.findall(report[0])[0]
        assert report == [
            "\n".join(
                [
                    f"**Run `{run}` completed** — Explicit plan: s1 (shell)",
                    "Nodes: 1 completed.",
                    "- ✅ `s1` (shell) completed",
                    "",
                    "**Output of `s1`**:",
                    "```",
                    "*PASSED* 3 _of_ 5",
                    "> note",
                    "# FAILED tests",
                    f"@{ZWSP}everyone <!channel>",
                    f"`{ZWSP}`{ZWSP}`",
                    "```",
                    "",
                    OFFLINE_NOTE,
                    f"Full record: `raven-bot runs show {run}` on the bot's host.",
                ]
            )
        ]
        _no_host_path(bot, bot.texts(thread))

        thread, report = await _discord_plan(bot, "s2: shell: seq 1 100000", approve=True)
        run = _RUN.findall(report[0])[0]
        assert report == [
            "\n".join(
                [
                    f"**Run `{run}` completed** — Explicit plan: s2 (shell)",
                    "Nodes: 1 completed.",
                    "- ✅ `s2` (shell) completed",
                    "",
                    "**Output of `s2`**:",
                    "```",
                    *SEQ_HEAD,
                    "… 99,960 lines omitted …",
                    *SEQ_TAIL,
                    "```",
                    "",
                    OFFLINE_NOTE,
                    f"Full record: `raven-bot runs show {run}` on the bot's host.",
                    "",
                    "📎 Attached to this thread: `s2-output.md`.",
                ]
            ),
            "",  # the message carrying the file
        ]
        _no_host_path(bot, bot.texts(thread))
        (attached,) = bot.fake.attachments_in(thread)
        assert attached.filename == "s2-output.md"
        assert b"\n5000\n" in attached.data and attached.data.endswith(b"\n100000")


async def test_discord_reports_a_denied_command_as_not_approved(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with discord_bot(monkeypatch) as bot:
        _, report = await _discord_plan(bot, "s1: shell: seq 1 3", approve=False)
        run = _RUN.findall(report[0])[0]
        assert report == [
            "\n".join(
                [
                    f"**Run `{run}` not approved** — Explicit plan: s1 (shell)",
                    "Nodes: 1 failed.",
                    "- ⛔ `s1` (shell) *not approved* — error below",
                    "",
                    "**Errors**:",
                    "- `s1`: Command not approved by the requester: 'seq 1 3'",
                    "",
                    f"Full record: `raven-bot runs show {run}` on the bot's host.",
                ]
            )
        ]


async def test_slack_notification_texts_are_cut_at_a_word(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    """A prompt's `text` (what notifications show of its blocks) is cut after a whole word,
    with an ellipsis, when posted and when closed."""
    async with slack_bot(monkeypatch) as bot:
        thread, _ = await bot.mention("s1: shell: seq 1 3")
        await eventually(lambda: any(p.get("blocks") for p in bot.posts(thread)))
        (pending,) = await bot.runtime.broker.pending()
        question = pending.question
        assert len(question) > 300  # the approval prompt explains the sandbox at length
        (prompt,) = [p for p in bot.posts(thread) if p.get("blocks")]
        _cut_at_a_word(prompt["text"], question, 300)
        prompt_ts = next(
            c.response["ts"]
            for c in bot.fake.calls_to("chat.postMessage")
            if c.ok and c.args.get("blocks") and c.args.get("thread_ts") == thread
        )
        await bot.click(buttons(prompt)[0], "U1", thread, prompt_ts)
        (closed,) = await bot.fake.wait_for_call("chat.update")
        shown, outcome = closed.args["text"].rsplit(" — ", 1)
        assert outcome == "Approve (by alice)"
        _cut_at_a_word(shown, question, 200)
        await bot.settle(thread)


def _cut_at_a_word(shown: str, full: str, limit: int) -> None:
    assert len(shown) <= limit and shown.endswith("…"), shown
    kept = shown.removesuffix("…")
    assert full.startswith(kept), (shown, full)
    assert full[len(kept)].isspace() or full[len(kept)] in ",;:", (shown, full)


async def test_slack_shows_a_failed_command_s_stderr_verbatim(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        line = "s1: shell: echo '*bold* > quote' >&2; exit 3"
        _, report = await _slack_plan(bot, line, approve=True)
        run = _RUN.findall(report)[0]
        assert report == "\n".join(
            [
                f"*Run `{run}` failed* — Explicit plan: s1 (shell)",
                "Nodes: 1 failed.",
                "• ❌ `s1` (shell) failed — error below",
                "",
                "*Errors*:",
                "• `s1`: The `shell` agent (`sh -c`) exited with code 3.",
                "```",
                "stderr (last lines):",
                "*bold* &gt; quote",
                "```",
                "",
                OFFLINE_NOTE,
                f"Full record: `raven-bot runs show {run}` on the bot's host.",
            ]
        )
