"""Permissions as a capability: RAVEN_HOME/permissions.toml checked before the start (a
broken file stops it with the line `doctor` prints, rather than serve with every call
denied), the tables of remembered allows and the audit, and the gates every run's tool calls
pass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from agents.permissions import rules_file_problem
from core.errors import ConfigError
from host.features.feature import BaseFeature, HostParts
from host.features.permissions.gate import RULES_FILE, PermissionGates
from host.features.permissions.migrations import MIGRATIONS
from host.graph.executor import PermitFactory


@dataclass(frozen=True)
class PermissionsSection:
    """No settings: RAVEN_HOME/permissions.toml is this capability's configuration."""


class PermissionsFeature(BaseFeature):
    """The permission gates of every run, with their rules file, allows and audit."""

    Section: ClassVar[type[PermissionsSection]] = PermissionsSection
    migrations = MIGRATIONS

    @classmethod
    def preflight(cls, home: Path) -> None:
        problem = rules_file_problem(home / RULES_FILE)
        if problem is not None:
            raise ConfigError(problem)

    def __init__(self, parts: HostParts, section: PermissionsSection) -> None:
        # The file is read again for each task, so an edit applies to the next one.
        self._gates = PermissionGates(parts.home, parts.store)

    def permit_factory(self) -> PermitFactory | None:
        return self._gates
