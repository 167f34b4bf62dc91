"""How pytest-xdist shares the tests out: one test at a time, except tests that share state
beyond one test, which run in one worker as one unit.

- The one-node Slurm cluster is started once per worker that needs it, and two clusters on
  one host would fight over the node: every module that uses it is one unit.
- An acceptance module is one walk through the README (later tests read what earlier ones
  left, and the shell commands run once in the background): each is one unit.

xdist's own `--dist loadgroup` cannot do this with pytest 9.2 (it renames `item._nodeid`,
which pytest no longer reads), so this is a LoadScope scheduler with our scopes. The
scheduler runs in the controller, which collects nothing: modules are told apart by file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).parent
# The session's Slurm cluster fixture (tests/conftest.py): a module that asks for it names it.
SLURM_FIXTURE = "slurm_cluster"


def slurm_modules() -> frozenset[str]:
    """The test files (as in node ids) that use the Slurm cluster."""
    return frozenset(
        f"tests/{path.relative_to(TESTS).as_posix()}"
        for path in TESTS.rglob("test_*.py")
        if SLURM_FIXTURE in path.read_text(encoding="utf-8")
    )


def scope_of(nodeid: str, slurm: frozenset[str]) -> str:
    """The unit a test is sent to a worker in."""
    module = nodeid.split("::", 1)[0]
    if module in slurm:
        return "slurm"
    if module.startswith("tests/acceptance/"):
        return module
    return nodeid


class GroupedScheduling(LoadScopeScheduling):
    """LoadScope with the scopes above."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._slurm = slurm_modules()

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid, self._slurm)
