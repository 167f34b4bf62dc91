"""Persistence: the SQLite store and the runner of the migrations each package registers."""

from core.store.checkpoints import BeforeCheckpoint, Checkpoints
from core.store.migrations import Migration, MigrationError
from core.store.store import (
    Row,
    Store,
    StoreClosed,
    WritePriority,
    WriteStats,
)

__all__ = [
    "BeforeCheckpoint",
    "Checkpoints",
    "Migration",
    "MigrationError",
    "Row",
    "Store",
    "StoreClosed",
    "WritePriority",
    "WriteStats",
]
