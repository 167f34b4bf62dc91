"""`RAVEN_THREAD_REPLIES` (issue 39): doctor says who the bot answers in its threads without
a mention, and a bad value stops the start naming the variable and the values it takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.doctor import CHECKS, run_checks
from bot.settings import SettingsError, load_settings


async def test_doctor_says_who_is_answered_without_a_mention(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    (check,) = [c for c in CHECKS if c.__name__ == "_check_thread_replies"]
    monkeypatch.setattr("bot.cli.doctor.CHECKS", (check,))
    (default,) = await run_checks(load_settings())
    assert (default.name, default.level) == ("thread replies", "ok")
    assert default.detail.startswith("RAVEN_THREAD_REPLIES=requester: ")
    assert "others' chatter gets nothing" in default.detail
    monkeypatch.setenv("RAVEN_THREAD_REPLIES", "mentions")
    (mentions,) = await run_checks(load_settings())
    assert mentions.detail.startswith("RAVEN_THREAD_REPLIES=mentions: ")


def test_a_bad_value_names_the_variable_and_the_values(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    monkeypatch.setenv("RAVEN_THREAD_REPLIES", "everyone")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert (
        "RAVEN_THREAD_REPLIES: Input should be 'requester', 'anyone' or 'mentions' "
        "(got 'everyone')" in str(caught.value)
    )
