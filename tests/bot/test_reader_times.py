"""A time each reader sees in their own zone: Slack's date token, Discord's timestamp, and
nothing extra on the console; a mark in someone else's text renders as a time and pings
nobody."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from bot.console.screen import Screen
from bot.discord.markdown import render_for_discord
from bot.slack.mrkdwn import markdown_to_mrkdwn, render_for_slack
from core.reader_time import drop_reader_times, reader_mark

WHEN = datetime(2026, 12, 24, 8, 0, tzinfo=UTC)
UNIX = int(WHEN.timestamp())
TEXT = f"Next: Thu 24 Dec 2026 09:00 CET{reader_mark(WHEN)}."


def test_slack_shows_the_time_in_each_readers_zone_after_the_named_one() -> None:
    (posted,) = render_for_slack(TEXT)
    assert posted == (
        f"Next: Thu 24 Dec 2026 09:00 CET (<!date^{UNIX}^{{date_short_pretty}} {{time}}"
        "|24 Dec 2026 08:00 UTC> your time)."
    )
    # Prompts render their question the same way.
    assert f"<!date^{UNIX}^" in markdown_to_mrkdwn(TEXT)


def test_discord_shows_its_own_timestamp() -> None:
    (posted,) = render_for_discord(TEXT)
    assert posted == f"Next: Thu 24 Dec 2026 09:00 CET (<t:{UNIX}:f> your time)."


def test_the_console_keeps_the_named_time_only() -> None:
    out = io.StringIO()
    Screen(out, on_gone=lambda: None).say(TEXT, key="k")
    assert "Next: Thu 24 Dec 2026 09:00 CET." in out.getvalue()
    assert "\u27e8" not in out.getvalue()
    assert drop_reader_times(TEXT) == "Next: Thu 24 Dec 2026 09:00 CET."


def test_a_mark_in_model_text_is_a_time_and_never_a_ping() -> None:
    forged = "hi <!here> \u27e8t:1|x\u27e9 \u27e8t:12\u27e9 <!date^1^{time}|x> <!channel>"
    (posted,) = render_for_slack(forged)
    assert "<!here>" not in posted and "<!channel>" not in posted
    # Only the well-formed mark became a token; what the model typed stays text.
    assert posted.count("<!date^") == 1 and "<!date^12^" in posted
