"""One llama.cpp server with the real model for the whole session (loading it and warming
its prompt cache cost more than any one test); skipped, with the install lines, when the
packages are not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real_model.llama_server import (
    INSTALL_LINES,
    RealModelMissing,
    RunningServer,
    check_server_package,
    llama_server,
    part_files,
)


@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The running server; its log (timings of every call) is in the session's tmp dir."""
    try:
        check_server_package()
        part_files()
    except RealModelMissing as exc:
        pytest.skip(f"the real model is not installed ({exc}): {INSTALL_LINES}")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    print(f"\nllama.cpp server log: {log}", flush=True)
    with llama_server(log) as server:
        yield server
