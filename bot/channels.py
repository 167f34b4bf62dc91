"""The channel registry: every chat platform the bot can serve, one line each.

`bot/cli/`, `app.py` and `doctor` use only this table; a platform's code lives in its own
package (`bot/slack/`, `bot/discord/`) and is imported only when configured.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.settings import Settings

if TYPE_CHECKING:  # the adapters' module is imported only to serve, not to parse a command
    from bot.channel import ChannelAdapter

AdapterFactory = Callable[[], "ChannelAdapter"]


@dataclass(frozen=True)
class ChannelSpec:
    """One platform: its name, the variable that turns it on, and where its factory lives."""

    name: str
    variable: str  # set → served by `raven-bot run`
    module: str  # imported only when used, so an unused platform costs nothing
    build: str  # `(Settings) -> ChannelAdapter` in `module`
    doctor: str  # `async (Settings) -> (ok, detail)` in `module`

    def configured(self, settings: Settings) -> bool:
        """True when its variable is set."""
        return settings.is_set(self.variable)

    def factory(self, settings: Settings) -> AdapterFactory:
        """A factory building this platform's adapter from `settings`."""
        build: Callable[[Settings], ChannelAdapter] = self._attr(self.build)
        return functools.partial(build, settings)

    def check(self, settings: Settings) -> Awaitable[tuple[bool, str]]:
        """The platform's `doctor` check."""
        check: Callable[[Settings], Awaitable[tuple[bool, str]]] = self._attr(self.doctor)
        return check(settings)

    def _attr(self, name: str) -> Any:
        return getattr(importlib.import_module(self.module), name)


CHANNELS: tuple[ChannelSpec, ...] = (
    ChannelSpec("slack", "SLACK_BOT_TOKEN", "bot.slack.factory", "slack_adapter", "slack_doctor"),
    ChannelSpec(
        "discord", "DISCORD_TOKEN", "bot.discord.factory", "discord_adapter", "discord_doctor"
    ),
)


def configured_channels(settings: Settings) -> list[ChannelSpec]:
    """The platforms whose variable is set."""
    return [spec for spec in CHANNELS if spec.configured(settings)]
