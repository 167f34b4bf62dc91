"""The `raven-bot` command line: `main` parses; each command group has its own module."""

from __future__ import annotations

from bot.cli.main import main

__all__ = ["main"]
