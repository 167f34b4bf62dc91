"""The acceptance suite's session-wide background work (see shell_commands.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.acceptance import shell_commands
from tests.acceptance.harness import Commands, end_processes_under, product_env, project_dir

SHELL_MODULE = "test_readme_shell_commands.py"


@pytest.fixture(scope="session")
def shell_commands_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Commands]:
    """The operator's independent command lines, started in the background."""
    root = tmp_path_factory.mktemp("readme-shell")
    # One worker per group, and one for the foreground campaign the operator stops.
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            commands = Commands(project_dir(root / "project"), product_env(root / "home"), pool)
            shell_commands.start(commands, root)
            yield commands
            end_processes_under(root)  # what a failed check left: the threads wait on it
    finally:
        end_processes_under(root)


@pytest.fixture(scope="session", autouse=True)
def start_shell_commands_early(request: pytest.FixtureRequest) -> None:
    """Without xdist, start them as the session starts when it runs their checks, so they
    run while the other tests do. Under xdist every worker collects every test, and this
    would start them in each worker: there the checks' module asks for them (one group, one
    worker; see tests/conftest.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.path.name == SHELL_MODULE for item in request.session.items):
        request.getfixturevalue("shell_commands_started")
