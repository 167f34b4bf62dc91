"""Permissions as a capability: RAVEN_HOME/permissions.toml checked before the start (a
broken file stops it with the line `doctor` prints, rather than serve with every call
denied), the tables of remembered allows and the audit, and the gates every run's tool calls
pass."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from agents.permissions import load_rules, rules_file_problem
from core.errors import ConfigError
from host.features.feature import BaseFeature, DoctorCheck, DoctorParts, HostParts
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

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: PermissionsSection) -> Sequence[DoctorCheck]:
        """The rules file, every section (`run` refuses to start with exactly this line when
        it fails)."""
        path = parts.home / RULES_FILE
        problem = await asyncio.to_thread(rules_file_problem, path)
        if problem is not None:
            return (DoctorCheck("permissions", "fail", problem),)
        rules = await asyncio.to_thread(load_rules, path, "")
        source = str(path) if path.exists() else "defaults (no permissions.toml)"
        detail = (
            f"mode {rules.mode}, {len(rules.allow)} allow / {len(rules.deny)} deny rule(s), "
            f"from {source}"
        )
        return (DoctorCheck("permissions", "ok", detail),)

    def __init__(self, parts: HostParts, section: PermissionsSection) -> None:
        # The file is read again for each task, so an edit applies to the next one.
        self._gates = PermissionGates(parts.home, parts.store)

    def permit_factory(self) -> PermitFactory | None:
        return self._gates
