"""`/raven status` as a team meets it (issue 41, part 4): the real `raven-bot run` serving
Slack (Socket Mode) and Discord at once against the loopback fakes. On both, the command is
answered to the caller alone and nothing appears in the channel; on Discord, `/raven` was
registered for the server at start-up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from tests.acceptance.harness import WITHIN, project_dir, serving, slack_env
from tests.fakes.discord import FakeDiscord, payloads
from tests.fakes.slack import FakeSlack
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

SLACK_ALICE = "U0AL1CE42"
DISCORD_ALICE = "100000000000000042"
GENERAL = "700000000000000001"
EPHEMERAL = 1 << 6


@dataclass
class Deployed:
    slack: FakeSlack
    discord: FakeDiscord


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployed]:
    root = tmp_path_factory.mktemp("slash-commands")
    home = root / "raven-home"
    home.mkdir()
    project = project_dir(root / "project")
    async with FakeSlack() as slack, FakeDiscord() as discord:
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        discord.add_user(DISCORD_ALICE, "alice", global_name="Alice")
        env = slack_env(
            home,
            slack.api_url,
            DISCORD_TOKEN="discord-acceptance-token.abcdefghijklmnop",
            RAVEN_DISCORD_API_URL=discord.base_url,
            RAVEN_DISCORD_GATEWAY_URL=discord.gateway_url,
        )
        async with serving(env, project, root / "raven-bot.log"):
            await slack.wait_connected(within=WITHIN)
            yield Deployed(slack, discord)


async def test_slash_status_on_slack_is_for_the_caller_alone(bot: Deployed) -> None:
    command = await bot.slack.send_slash_command("status", user=SLACK_ALICE, within=WITHIN)
    assert command.ack_payload is None  # acknowledged at once, answered after
    (post,) = await bot.slack.wait_for_response_url_post(command.response_url_id, within=WITHIN)
    assert post.json["response_type"] == "ephemeral"
    assert str(post.json["text"]).startswith("*Status*: running nothing"), post.json
    assert bot.slack.calls_to("chat.postMessage") == []
    assert bot.slack.calls_to("chat.postEphemeral") == []


async def test_slash_status_on_discord_is_for_the_caller_alone(bot: Deployed) -> None:
    fake = bot.discord

    def registered() -> bool:
        return any(c["name"] == "raven" for c in fake.commands.commands(fake.guild_id))

    await eventually(registered, within=WITHIN, what="/raven registered for the server")
    status = [payloads.subcommand("status")]
    sent = await fake.invoke_command("raven", GENERAL, DISCORD_ALICE, options=status)

    def answered() -> list[dict[str, Any]]:
        return [c for c in fake.interaction_callbacks if c["id"] == sent["id"]]

    await eventually(answered, within=WITHIN, what="the interaction's answer")
    (callback,) = answered()
    assert callback["type"] == 4 and callback["data"]["flags"] & EPHEMERAL, callback
    assert str(callback["data"]["content"]).startswith("**Status**: running nothing")
    assert fake.bot_messages() == []
