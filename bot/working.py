"""The "is working…" line of every platform that has one, built at the assembly root: the
adapters that are a `WorkingStatus`, and the log redactor's secrets so that a status shows
none of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bot.channel import ChannelAdapter
from bot.logging_setup import SecretRedactor
from bot.settings import Settings
from host.conversation.working import WorkingStatuses
from host.features.mcp.environ import declared_secrets
from host.runtime.ports import WorkingStatus


def working_statuses(settings: Settings, adapters: Sequence[ChannelAdapter]) -> WorkingStatuses:
    """The tracker, redacting exactly what the logs redact (settings and mcp.json values)."""
    secrets = [*settings.secret_values(), *declared_secrets(settings.home, Path.cwd())]
    return WorkingStatuses(
        {a.platform: a for a in adapters if isinstance(a, WorkingStatus)},
        redact=SecretRedactor(secrets).redact,
    )
