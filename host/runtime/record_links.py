"""Links to a conversation's records in the read-only web viewer, as the Host posts them.

A port: the viewer (bot/web) signs each link for one conversation; the Host only asks for
one where a thread is told about a run, a campaign or its scheduled work. Without the
viewer (`RAVEN_WEB_PORT` unset) no link is made and nothing is posted.
"""

from __future__ import annotations

from typing import Protocol

from core.ids import ConversationRef


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

    def schedules(self, conv: ConversationRef) -> str:
        """The conversation's scheduled tasks: next fire times and recent firings."""
        ...

    def hidden(self, text: str) -> str:
        """`text` with every viewer link's token left out: what a model is shown of the
        thread (a link opens its conversation's records; a model could carry it elsewhere)."""
        ...


def open_line(label: str, url: str) -> str:
    """The line a thread gets under a report or a notice: one Markdown link."""
    return f"🔎 [{label}]({url})"
