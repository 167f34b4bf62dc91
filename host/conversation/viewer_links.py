"""The viewer's "Open" links as a thread gets them: under the reply of a turn that ran a
graph or reports one, and on a background run's status message.

Made by the bot, never by a model: the model's reply is posted as it wrote it, and the link
line follows it. What a model is shown of the thread has every link's token left out.
"""

from __future__ import annotations

import re
from typing import Final

from core.ids import ConversationRef
from host.graph.run_store import RunStore
from host.runtime.record_links import RecordLinks, open_line

# The key of a run report's proactive turn (host/conversation/run_events.py).
_REPORT_KEY: Final = re.compile(r"^run:([^:]+):report$")
# A turn rarely starts more than one run; a reply never gets more lines than this.
_MOST: Final = 5


class RunLinks:
    """Links to the runs a reply is about."""

    def __init__(self, runs: RunStore, links: RecordLinks) -> None:
        self._runs = runs
        self.links = links

    async def footer(self, conv: ConversationRef, *, since: float, turn_key: str = "") -> str:
        """The link lines for the run a report turn (`turn_key` `run:<id>:report`) is about
        and the runs the turn started (created in `conv` at or after `since`); empty when
        there are none."""
        ids: list[str] = []
        reported = _REPORT_KEY.match(turn_key)
        if reported is not None:
            ids.append(reported.group(1))
        for run in await self._runs.runs(conv.id, limit=_MOST):
            if run.created_at >= since and run.id not in ids:
                ids.append(run.id)
        return "\n".join(self.line(conv, run_id) for run_id in ids[:_MOST])

    def line(self, conv: ConversationRef, run_id: str) -> str:
        """The "Open" line of one run."""
        return open_line(f"Open run {run_id}", self.links.run(conv, run_id))


def with_footer(text: str, footer: str) -> str:
    """`text` with the link lines under it (as it is when there are none)."""
    return f"{text}\n\n{footer}" if footer else text
