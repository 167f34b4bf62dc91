"""`raven-bot doctor` for Slack: the bot token works (`auth.test`) and has every scope."""

from __future__ import annotations

from importlib import resources

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient


def required_scopes() -> list[str]:
    """Bot scopes listed in the shipped app manifest."""
    text = resources.files("bot.slack").joinpath("manifest.yaml").read_text("utf-8")
    scopes: list[str] = []
    in_bot = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "bot:":
            in_bot = True
            continue
        if in_bot:
            if stripped.startswith("- "):
                scopes.append(stripped[2:].strip())
            elif stripped and not stripped.startswith("#"):
                break
    return scopes


async def check_slack(token: str, api_url: str) -> tuple[bool, str]:
    """(ok, detail): team and bot identity, or what is wrong and how to fix it."""
    client = AsyncWebClient(token=token, base_url=api_url)
    try:
        resp = await client.auth_test()
    except SlackApiError as exc:
        error = exc.response.get("error", "unknown_error")
        return False, f"auth.test failed ({error}): check SLACK_BOT_TOKEN (xoxb-…)"
    except Exception as exc:
        return False, f"cannot reach Slack at {api_url}: {exc}"
    header = resp.headers.get("x-oauth-scopes") or resp.headers.get("X-OAuth-Scopes") or ""
    granted = {s.strip() for s in str(header).split(",") if s.strip()}
    missing = [s for s in required_scopes() if s not in granted]
    who = f"team {resp.get('team')} ({resp.get('team_id')}), bot <@{resp.get('user_id')}>"
    if missing:
        why = (
            "; without files:write no file is attached to a thread"
            if "files:write" in missing
            else ""
        )
        return False, (
            f"{who}; missing scopes: {', '.join(missing)} "
            f"(reinstall the app with bot/slack/manifest.yaml{why})"
        )
    return True, who
