"""Workspace confinement: a path a submission names must resolve inside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

from host.graph.admission.errors import short


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def confine_path(workspace: Path, raw: str) -> Path:
    """Resolve `raw` against `workspace` (symlinks followed); ValueError if it lands outside."""
    if not raw.strip():
        raise ValueError("the path is empty")
    if "\x00" in raw:
        raise ValueError(f"the path `{short(raw)}` contains a NUL byte")
    root = workspace.resolve()
    candidate = Path(raw)
    resolved = (root / candidate).resolve()  # an absolute `raw` replaces `root` here
    if _inside(resolved, root):
        return resolved
    if candidate.is_absolute():
        # The caller may have spelled the workspace through a symlinked prefix.
        raise ValueError(f"`{raw}` is an absolute path outside the workspace `{root}`")
    lexical = Path(os.path.normpath(root / candidate))
    if not _inside(lexical, root):
        raise ValueError(f"`{raw}` leaves the workspace through `..`")
    raise ValueError(f"`{raw}` resolves through a symlink to `{resolved}`, outside the workspace")
