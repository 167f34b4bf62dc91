"""The viewer's pages: Jinja2 templates with autoescaping on, so every value reaches the
page escaped unless a filter here made it safe HTML itself (rendered Markdown, `<time>`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from bot.web.untrusted import SHOWN_CHARS, markdown, shown


class Pages:
    """Renders the viewer's templates; times are written in `zone` (the team's) and turned
    into the reader's own zone in the browser when scripts run."""

    def __init__(self, zone: ZoneInfo) -> None:
        self._zone = zone
        # An output never changes once written: its HTML is kept for the next view (a live
        # page is served again at every change of its run).
        self._markdown = lru_cache(maxsize=1024)(markdown)
        self._env = Environment(
            loader=PackageLoader("bot.web", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters.update(
            {
                "when": self.when,
                "md": self.md,
                "shown": shown,
                "duration": duration,
                "short": short_id,
            }
        )

    def render(self, template: str, **values: Any) -> str:
        """A whole page."""
        return self._env.get_template(template).render(**values)

    def md(self, text: str | None) -> Markup:
        """Untrusted Markdown as safe HTML (`untrusted.markdown`), remembered."""
        if text is not None and len(text) > SHOWN_CHARS:
            return markdown(text)  # cut when shown: not worth keeping whole
        return self._markdown(text)

    def when(self, at: float | datetime | None) -> Markup:
        """A moment as `<time>`: machine-readable UTC, shown in the team's zone."""
        if at is None:
            return Markup("—")
        moment = at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        local = moment.astimezone(self._zone)
        return Markup('<time datetime="{}">{}</time>').format(
            moment.astimezone(UTC).isoformat(timespec="seconds"),
            local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        )


def duration(seconds: float | None) -> str:
    """`3.2 s`, `4 min 05 s`, `2 h 07 min`."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def short_id(value: str, keep: int = 12) -> str:
    """An id as people read it: whole when short, else its start."""
    return value if len(value) <= keep else value[:keep] + "…"
