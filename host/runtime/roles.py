"""Who besides a piece of work's owner may act on it (SPEC §12): approvers and admins."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Roles:
    """RAVEN_ADMINS and RAVEN_APPROVERS: they act on anyone's work."""

    admins: Collection[str] = ()
    approvers: Collection[str] = ()

    def privileged(self, user_id: str) -> bool:
        """Admins and approvers act on anyone's campaigns and runs."""
        return user_id in self.admins or user_id in self.approvers
