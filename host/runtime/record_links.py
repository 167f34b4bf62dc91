"""Links to a conversation's records in the read-only web viewer, as the Host posts them.

A port: the viewer (bot/web) signs each link for one conversation; the Host only asks for
one where a thread is told about a run, a campaign or its scheduled work. Without the
viewer (`RAVEN_WEB_PORT` unset) no link is made and nothing is posted.
"""

from __future__ import annotations

import re
from typing import Final, Protocol

from core.ids import ConversationRef

# A link token as the viewer signs it (`v1.<payload>.<signature>`, bot/web/tokens.py),
# wherever it appears: posted by the bot, pasted by a person, under any base URL.
_TOKEN: Final = re.compile(r"\bv1\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{20,}")


class RecordLinks(Protocol):
    """Signed, expiring viewer links, each good for one conversation's records only."""

    def conversation(self, conv: ConversationRef) -> str:
        """The conversation's overview: its runs, campaigns and scheduled tasks."""
        ...

    def run(self, conv: ConversationRef, run_id: str) -> str:
        """One run of the conversation: its graph, each node's task, output and transcript."""
        ...

    def campaign(self, conv: ConversationRef, campaign_id: str) -> str:
        """One campaign of the conversation: its chart, rounds and decisions."""
        ...


def open_line(label: str, url: str) -> str:
    """The line a thread gets under a report or a notice: one Markdown link."""
    return f"🔎 [{label}]({url})"


def without_link_tokens(text: str) -> str:
    """`text` with every viewer link's token left out: what a model is shown of a thread.
    A link opens its conversation's records, and a model's words can travel (memory, other
    threads); applied whether or not the viewer is on now, since old links stay valid."""
    return _TOKEN.sub("(link)", text) if "v1." in text else text
