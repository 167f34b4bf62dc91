"""Where a campaign's command may run: the user's directory, never the bot's own files.

A round runs with its working directory (the campaign's `workdir`) mounted writable at the same
path inside the sandbox, plus the machine's read-only `mounts`. Neither may be the bot's data
directory (RAVEN_HOME: the database, every conversation's workspace, the campaigns' control
files) or contain it; inside RAVEN_HOME only a conversation's own workspace
(`RAVEN_HOME/workspaces/<one>/…`) may be used. The bot's working directory (which holds `.env`)
is refused as well, or any directory containing it, unless the operator chose it: explicitly
(`raven-bot campaigns run --workdir`), or by running a one-shot command there (`cd project &&
raven-bot campaigns run`: the current directory is then the operator's project). Paths are
compared after resolving symlinks, so a link to a forbidden directory is refused like the
directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

WORKSPACES: Final = "workspaces"  # RAVEN_HOME's per-conversation workspaces


@dataclass(frozen=True)
class BotPaths:
    """The bot's own directories, which a campaign's workdir and mounts must stay out of."""

    home: Path  # RAVEN_HOME
    bot_dir: Path  # the bot's working directory (`.env`)
    # True in a one-shot command: `bot_dir` is where the operator typed it, their project.
    operator_dir: bool = False

    @classmethod
    def of(cls, home: Path, bot_dir: Path | None = None, *, operator_dir: bool = False) -> BotPaths:
        """Resolved paths (`bot_dir` defaults to the current directory)."""
        return cls(_resolved(home), _resolved(bot_dir or Path.cwd()), operator_dir)


def _resolved(path: Path) -> Path:
    return Path(os.path.expanduser(path)).resolve()


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def workdir_problem(
    raw: str, paths: BotPaths, *, explicit: bool = False, what: str = "workdir"
) -> str | None:
    """Why `raw` may not be a campaign's working directory (or, with `what="mount"`, one of
    its read-only mounts); None when it may. `explicit`: the operator typed it (`campaigns
    run`), so the bot's working directory itself is allowed, as it is when that directory is
    the operator's (`paths.operator_dir`)."""
    if not raw.startswith("/"):
        return f"{what} {raw!r} is not an absolute path: write it from the root, e.g. /srv/project"
    path = _resolved(Path(raw))
    shown = f"{what} {raw}" + (f" (resolves to {path})" if str(path) != raw.rstrip("/") else "")
    if _within(paths.home, path):
        return (
            f"{shown} is or contains RAVEN_HOME ({paths.home}), the bot's data: a round must "
            "not see it; pick a project directory outside it"
        )
    if _within(path, paths.home):
        workspaces = paths.home / WORKSPACES
        if path.parent == workspaces or workspaces in path.parent.parents:
            return None  # inside one conversation's workspace
        return (
            f"{shown} lies inside RAVEN_HOME ({paths.home}), the bot's data; only a "
            f"conversation's own workspace under {workspaces}/ may be used there"
        )
    if (explicit or paths.operator_dir) and path == paths.bot_dir:
        return None
    if _within(paths.bot_dir, path):
        return (
            f"{shown} is or contains the bot's working directory ({paths.bot_dir}), which "
            "holds its `.env`; pick a project directory outside it (the operator may still "
            "choose it explicitly with `raven-bot campaigns run --workdir`)"
        )
    return None
