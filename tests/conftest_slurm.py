"""The session's one-node Slurm cluster, for the tests that import this fixture.

Imported by test modules (not a conftest.py, so other modules do not pay for it). Skipped, with
the reason printed, when Slurm is not installed or the tests are not root.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm_cluster import SlurmCluster, missing, running_cluster


@pytest.fixture(scope="session", name="slurm_cluster")
def slurm_cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running one-node Slurm cluster, started once and stopped at the end of the session."""
    reason = missing()
    if reason is not None:
        pytest.skip(f"Slurm tests skipped: {reason}")
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
