"""Checks that RAVEN_HOME is usable, done with plain `sqlite3` before any async store opens.

A failed open of the async store can leave its connection thread running, which keeps the
process alive at exit; probing synchronously first turns every such case into one clear line.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from core.ids import ConversationRef


class HomeError(RuntimeError):
    """RAVEN_HOME (or the database in it) is unusable; the message is one line naming it."""


def check_home(home: Path) -> None:
    """Raise `HomeError` unless `home` is (or can be made) a writable directory whose
    `raven.db` opens as a database."""
    if home.exists() and not home.is_dir():
        raise HomeError(
            f"RAVEN_HOME={home} is not a directory (a file is in the way); "
            "point RAVEN_HOME at a directory."
        )
    probe = home / f".write-test-{uuid.uuid4().hex[:8]}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise HomeError(
            f"RAVEN_HOME={home} is not a writable directory ({exc.strerror or exc}); "
            "point RAVEN_HOME at a directory you can write to."
        ) from None
    check_database(home / "raven.db", home)


def check_database(path: Path, home: Path) -> None:
    """Raise `HomeError` unless `path` (when it exists: the store creates it) opens as an
    SQLite database.

    Read-only: a writable connection closing as the log's last one checkpoints it, which
    could sync the commits of a bot that died before it synced the files they point at
    (the store that opens next syncs them first: `core.store.log_lock`)."""
    if not path.exists():
        return
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", timeout=5, uri=True)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise HomeError(
            f"RAVEN_HOME={home}: cannot open the database {path.name} ({exc}); "
            "move it aside or point RAVEN_HOME elsewhere."
        ) from None


def workspace_for(home: Path) -> Callable[[ConversationRef], Path]:
    """Per-conversation agent workspaces under RAVEN_HOME/workspaces/ (created on use)."""

    def workspace(conv: ConversationRef) -> Path:
        readable = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{conv.platform}-{conv.channel}")[:60]
        digest = hashlib.sha256(conv.id.encode()).hexdigest()[:10]
        path = home / "workspaces" / f"{readable}-{digest}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    return workspace
