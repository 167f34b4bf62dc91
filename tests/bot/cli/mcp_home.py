"""What the `mcp` command-line and doctor tests share: the loopback server as an mcp.json
entry, the file written in a RAVEN_HOME, and the root logger kept for the next test."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FAKE = str(Path(__file__).parents[2] / "fakes" / "mcp_server.py")


@pytest.fixture(autouse=True)
def logging_kept() -> Iterator[None]:
    """main() configures the root logger for a process; give the next test pytest's back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def fake_server(*flags: str, **extra: Any) -> dict[str, Any]:
    """The loopback server's entry (it lives in the repository, which the sandbox shows
    only when told)."""
    readable = {"readonly": [str(Path(FAKE).parent)]}
    return {"command": sys.executable, "args": [FAKE, *flags], **readable, **extra}


def write_config(home: Path, servers: dict[str, Any]) -> Path:
    """RAVEN_HOME/mcp.json listing `servers`."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path
