"""RAVEN_HOME/raven.db opened by a one-shot command (the schema brought up to date)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bot.home import HomeError
from bot.schema import all_migrations
from core.store import Store


@asynccontextmanager
async def open_database(home: Path) -> AsyncIterator[Store]:
    """The bot's database in `home` (HomeError naming the file if it will not open)."""
    store = Store(home / "raven.db", all_migrations())
    try:
        await store.open()
    except (OSError, sqlite3.Error) as exc:
        # Close what did open: a connection thread left running keeps the process alive.
        await store.close()
        raise HomeError(f"RAVEN_HOME={home}: cannot open {store.path}: {exc}") from None
    try:
        yield store
    finally:
        await store.close()
