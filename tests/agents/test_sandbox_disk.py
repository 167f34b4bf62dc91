"""What `df` measures inside the real bubblewrap sandbox, which the README's disk examples rely
on: the workspace (`.`) is a bind mount of a directory on the host's disk that holds
RAVEN_HOME, so `df .` there measures that disk; `/` is the sandbox's own in-memory root, so
`df /` measures nothing of the host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.sandboxing import real_sandbox


def _in_sandbox(workspace: Path, command: str) -> str:
    sandbox = real_sandbox(hidden=(workspace.parent.parent,))
    launch = sandbox.launch(
        ["sh", "-c", command], workspace=workspace, env={"PATH": "/usr/bin:/bin"}
    )
    done = subprocess.run(
        launch.argv,
        preexec_fn=launch.preexec,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def _df_total_bytes(output: str) -> tuple[int, str]:
    """(total bytes, mount point) of `df -P -B1` output's one filesystem."""
    fields = output.splitlines()[1].split()
    return int(fields[1]), fields[-1]


def test_df_of_the_workspace_measures_the_hosts_disk_and_df_of_root_does_not(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "raven-home" / "workspaces" / "w"
    workspace.mkdir(parents=True)
    host = os.statvfs(workspace)
    host_total = host.f_blocks * host.f_frsize

    here, mounted_on = _df_total_bytes(_in_sandbox(workspace, "df -P -B1 ."))
    assert here == host_total
    assert mounted_on == str(workspace)
    # The same device as the host's directory, not the sandbox's root.
    devices = _in_sandbox(workspace, "stat -c %d . /").split()
    assert int(devices[0]) == os.stat(workspace).st_dev
    assert devices[1] != devices[0]
    _, root = _df_total_bytes(_in_sandbox(workspace, "df -P -B1 /"))
    assert root == "/"
    assert "tmpfs" in _in_sandbox(workspace, "df -P /").splitlines()[1]
