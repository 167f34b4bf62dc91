"""`/raven` on Slack: a slash command answered to its caller alone.

The command is a typed control word or chat command said at channel level (Slack allows
no slash commands in threads): recorded and deduplicated by its `trigger_id` before the ack
(a redelivered envelope runs once), answered after it through the command's `response_url`
as an ephemeral response. Nothing is posted in the channel."""

from __future__ import annotations

import asyncio
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond

from bot.channel import Ingress, PrivateCommands
from bot.slack.ingress import IngressDeps
from bot.slack.mrkdwn import render_for_slack
from bot.slack.normalize import DM_THREAD
from bot.slack.pings import neutralize_slack_pings
from host.conversation.slash import typed_text
from host.runtime.messages import InboundMessage

COMMAND = "/raven"
# A response_url takes five responses: the rest of a longer answer is left out.
_MOST_PARTS = 5


def register_slash_command(app: AsyncApp, ingress: Ingress, deps: IngressDeps) -> None:
    """Listen for `/raven` when the inbox answers commands privately."""
    if isinstance(ingress.inbox, PrivateCommands):
        app.command(COMMAND)(SlackSlashCommands(ingress.inbox, deps).on_command)


class SlackSlashCommands:
    """bolt's `/raven` listener."""

    def __init__(self, commands: PrivateCommands, deps: IngressDeps) -> None:
        self._commands = commands
        self._deps = deps

    async def on_command(
        self, ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond
    ) -> None:
        """Refused, recorded or dropped as a duplicate before the ack; answered after it."""
        deps = self._deps
        user = str(command.get("user_id") or "")
        channel = str(command.get("channel_id") or "")
        trigger = str(command.get("trigger_id") or "")
        if not user or not channel or not trigger:
            await ack()
            return
        is_dm = channel.startswith("D")
        refusal = deps.policy.refusal(user, channel, is_dm=is_dm)
        if refusal is not None:
            await ack()
            deps.background.spawn(self._respond(respond, refusal), f"slash-refuse:{trigger}")
            return
        msg = InboundMessage(
            platform="slack",
            workspace=str(command.get("team_id") or "T"),
            channel=channel,
            thread=DM_THREAD,  # channel level: the conversation is the channel's (or the DM)
            message_id=trigger[:128],
            author_id=user,
            # No users.info before the ack: the name known already, else the id.
            author_name=deps.identity.cached(user)[:128] or user,
            text=typed_text(str(command.get("text") or "")),
            event_id=f"slash:{trigger}"[:256],
            is_dm=is_dm,
        )
        answer = await self._commands.answer_privately(msg)
        await ack()
        if answer is not None:
            deps.background.spawn(self._answer(respond, answer), f"slash:{trigger}")

    async def _answer(self, respond: AsyncRespond, answer: asyncio.Task[str]) -> None:
        await self._respond(respond, await answer)

    async def _respond(self, respond: AsyncRespond, text: str) -> None:
        """Ephemeral mrkdwn parts through the response_url, never pinging anyone."""
        for part in (render_for_slack(text) or ["(empty)"])[:_MOST_PARTS]:
            await respond(
                text=neutralize_slack_pings(part),
                response_type="ephemeral",
                replace_original=False,
            )
