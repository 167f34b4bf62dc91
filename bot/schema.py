"""Every package's migrations, in the one order every Store of raven.db is opened with."""

from __future__ import annotations

from core.store import Migration
from host.evaluation.evolution.migrations import MIGRATIONS as EVOLUTION
from host.features.permissions.migrations import MIGRATIONS as PERMISSIONS
from host.features.schedules.migrations import MIGRATIONS as SCHEDULES
from host.features.skills.migrations import MIGRATIONS as SKILLS
from host.graph.migrations import MIGRATIONS as GRAPH
from host.nudges.migrations import MIGRATIONS as NUDGES
from host.prompts.migrations import MIGRATIONS as PROMPTS
from host.runtime.migrations import MIGRATIONS as CONVERSATIONS
from memory.migrations import MIGRATIONS as MEMORY
from oncall.migrations import MIGRATIONS as ONCALL


def all_migrations() -> tuple[Migration, ...]:
    """The migrations of every package owning tables in raven.db.

    Conversations first: other packages' tables refer to them, and memory's scope migration
    reads their messages. A package that adds tables adds its tuple here.
    """
    return (
        *CONVERSATIONS,
        *PROMPTS,
        *GRAPH,
        *ONCALL,
        *MEMORY,
        *SKILLS,
        *PERMISSIONS,
        *SCHEDULES,
        # After SCHEDULES: its first version keeps the `nudges` table schedules made.
        *NUDGES,
        *EVOLUTION,
    )
