"""A thread reads in causal order (issue 39): the turn that starts a background run says so
before the run posts anything (its status message, its command's approval prompt)."""

from __future__ import annotations

import pytest

from tests.helpers import eventually
from tests.slack_harness import buttons, slack_bot


async def test_the_started_run_reply_comes_before_the_runs_approval_prompt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        thread, _ = await bot.mention("o1: shell: rm -rf ./scratch", user="U1")
        await eventually(lambda: any(buttons(p) for p in bot.posts(thread)), within=60)
        posts = bot.posts(thread)
        first_prompt = next(i for i, p in enumerate(posts) if buttons(p))
        said = [str(p.get("text")) for p in posts[:first_prompt]]
        assert any(t.startswith("Started run `run_") for t in said), said
