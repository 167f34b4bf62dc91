"""The real bubblewrap sandbox for tests (bwrap must be installed: `apt-get install bubblewrap`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agents.sandbox import Sandbox, select_sandbox


def real_sandbox(hidden: Sequence[Path] = ()) -> Sandbox:
    """A probed bubblewrap sandbox; fails loudly if bwrap cannot run here."""
    sandbox = select_sandbox(hidden=hidden, unsandboxed=False)
    assert sandbox.kind == "bwrap", sandbox.description
    return sandbox
