"""The test suite's own shared fixtures are shared: one definition for every module."""

from __future__ import annotations

import pytest


def test_every_module_that_uses_slurm_gets_the_one_session_cluster(
    request: pytest.FixtureRequest,
) -> None:
    # Regression: the fixture was imported into each module, which made it a separate
    # session fixture per module: six clusters per worker, ~23 s of teardown.
    manager = request._fixturemanager
    users = [i for i in request.session.items if "slurm_cluster" in getattr(i, "fixturenames", ())]
    definitions = {id(manager.getfixturedefs("slurm_cluster", item)[-1]) for item in users}  # type: ignore[index]
    assert len(definitions) <= 1, f"{len(definitions)} definitions of slurm_cluster"
