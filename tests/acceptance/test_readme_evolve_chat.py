"""The README's chat evolution, through the real `raven-bot run` on Slack (Socket Mode,
against the loopback fakes) with a model key: "an admin types `evolve code sums` to run
`RAVEN_HOME/evolve/tasks/sums.jsonl` in the background: progress comes to the thread, and
the result as an approval prompt only admins can answer; approving it promotes the new
version". Then `raven-bot harness list` shows it active."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import WITHIN, project_dir, serving, sh, slack_env
from tests.acceptance.test_readme_deployed import CHANNEL, SLACK_ALICE, _buttons
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually
from tests.host.features.test_evolution_chat import _respond, _write_tasks

pytestmark = pytest.mark.slow


async def test_an_admin_evolves_code_from_a_slack_thread_and_approves_it(tmp_path: Path) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    _write_tasks(home)
    project = project_dir(tmp_path / "project")
    async with FakeSlack() as slack, FakeAnthropic() as model:
        model.responder = _respond
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(
            home,
            slack.api_url,
            ANTHROPIC_API_KEY="sk-ant-acceptance-0123456789",
            ANTHROPIC_BASE_URL=model.base_url,
            RAVEN_ADMINS=SLACK_ALICE,
        )
        async with serving(env, project, tmp_path / "raven-bot.log"):
            await slack.wait_connected(within=WITHIN)
            thread = slack.next_ts()
            event = payloads.app_mention(CHANNEL, SLACK_ALICE, "<@UBOT> evolve code sums", thread)
            await slack.send_envelope("events_api", payloads.event_callback(event))

            def posts() -> list[dict[str, Any]]:
                return [
                    {**c.args, "ts": c.response.get("ts")}
                    for c in slack.calls_to("chat.postMessage")
                    if c.ok and c.args.get("thread_ts") == thread
                ]

            def said(text: str) -> bool:
                return any(text in str(p.get("text")) for p in posts())

            await eventually(lambda: said("Evolving `code`"), within=WITHIN)
            await eventually(lambda: any(_buttons(p) for p in posts()), within=180)
            prompt = next(p for p in posts() if _buttons(p))
            assert "harness v1" in str(prompt.get("text"))
            approve = next(b for b in _buttons(prompt) if b["text"]["text"] == "Approve")
            click = payloads.block_actions(
                approve["action_id"],
                approve["value"],
                SLACK_ALICE,
                CHANNEL,
                prompt["ts"],
                thread_ts=thread,
                response_url=slack.response_url("click"),
            )
            await slack.send_envelope("interactive", click)
            await eventually(lambda: said("runs harness v1"), within=WITHIN)
        listed = await asyncio.to_thread(sh, "raven-bot harness list", env=env, cwd=project)
        assert "code v1  active" in listed.out, listed.both
