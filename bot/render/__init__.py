"""Pure text rendering for chat egress: platform-neutral helpers shared by the adapters.

Slack's Markdown-to-mrkdwn conversion and ping neutralization live in `bot.slack.mrkdwn`.
"""

from __future__ import annotations

from bot.render.split import ZWSP, neutralize_broadcasts, split_message

__all__ = ["ZWSP", "neutralize_broadcasts", "split_message"]
