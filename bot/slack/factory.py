"""The Slack entry of the channel registry: build the adapter and check it for `doctor`."""

from __future__ import annotations

from bot.access import AccessPolicy
from bot.channel import ChannelAdapter
from bot.home import workspace_for
from bot.settings import Settings
from bot.slack.adapter import SlackAdapter
from bot.slack.config import SlackConfig
from bot.slack.doctor import check_slack
from bot.slack.settings import SlackSettings


def slack_configured(settings: Settings) -> bool:
    """Slack is served when its bot token is set."""
    return SlackSettings().slack_bot_token is not None


def slack_adapter(settings: Settings) -> ChannelAdapter:
    """The Slack adapter from settings (transport chosen by which tokens are set): its own
    section (`SlackSettings`) and what every platform shares."""
    config = settings.section(SlackConfig, prefix="slack_", reveal=True)
    try:
        _ = config.transport
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    policy = AccessPolicy.from_lists(
        allowed_users=settings.allowed_users,
        allowed_channels=settings.allowed_channels,
        admins=settings.admins,
        dm_enabled=settings.dm_enabled,
    )
    return SlackAdapter(
        config,
        policy=policy,
        workspace=workspace_for(settings.home),
        event_log=settings.home / "slack-events.db",
    )


async def slack_doctor(settings: Settings) -> tuple[bool, str]:
    """(ok, detail) for `raven-bot doctor`: transport, token, identity and scopes."""
    own = SlackSettings()
    if own.slack_bot_token is None:
        return True, "not configured (set SLACK_BOT_TOKEN to serve Slack)"
    if own.slack_app_token is None and own.slack_signing_secret is None:
        return False, "SLACK_BOT_TOKEN needs SLACK_APP_TOKEN or SLACK_SIGNING_SECRET"
    ok, detail = await check_slack(own.slack_bot_token.get_secret_value(), own.slack_api_url)
    transport = "Socket Mode" if own.slack_app_token is not None else "HTTP Events API"
    return ok, f"{transport}: {detail}"
