"""The acceptance suite's session-wide background work (see shell_commands.py)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.acceptance import shell_commands
from tests.acceptance.harness import Commands, product_env, project_dir

SHELL_MODULE = "test_readme_shell_commands.py"


@pytest.fixture(scope="session", autouse=True)
def background_shell(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Commands | None]:
    """The operator's independent command lines, started as the session starts when it runs
    their checks (None otherwise)."""
    if not any(item.path.name == SHELL_MODULE for item in request.session.items):
        yield None
        return
    root = tmp_path_factory.mktemp("readme-shell")
    # One worker per group, and one for the foreground campaign the operator stops.
    with ThreadPoolExecutor(max_workers=4) as pool:
        commands = Commands(project_dir(root / "project"), product_env(root / "home"), pool)
        shell_commands.start(commands, root)
        yield commands
