"""What the kill -9 acceptance tests share: the people and places of the fakes, the app's
scopes, the bot's file records read as another process would, and buttons on both
platforms."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.acceptance.harness import WITHIN
from tests.acceptance.test_readme_deployed import README_SCOPES
from tests.fakes.discord import Recorded

CHANNEL = "C0GENERAL"
ALICE = "U0AL1CE42"
GENERAL = "700000000000000001"
DISCORD_ALICE = "100000000000000001"
# The app installed from the README's manifest: files:write included.
SCOPES = README_SCOPES


def file_rows(home: Path) -> list[tuple[str, str]]:
    """(delivery, text) of every outgoing file the bot recorded, read as another process
    would: read-only, never holding a write lock on the bot's database."""
    path = home / "raven.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=WITHIN)
    try:
        rows = db.execute(
            "SELECT delivery, text FROM messages WHERE file IS NOT NULL ORDER BY id"
        ).fetchall()
    except sqlite3.OperationalError:  # the bot has not created its tables yet
        return []
    finally:
        db.close()
    return [(str(delivery), str(text)) for delivery, text in rows]


def slack_blocks(args: dict[str, Any]) -> list[dict[str, Any]]:
    """A Slack post's blocks (the SDK may send them as a JSON string)."""
    blocks = args.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def slack_buttons(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a Slack post."""
    return [
        e for b in slack_blocks(args) if b.get("type") == "actions" for e in b.get("elements", [])
    ]


def discord_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a Discord message."""
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


def carries_files(request: Recorded) -> bool:
    """Whether a recorded Discord request attached files (what the fake holds)."""
    return bool(request.files)
