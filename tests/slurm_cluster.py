"""A real one-node Slurm cluster for tests (../shared/notes/slurm-single-node.md).

Config in a temporary directory, `slurmctld -c` then `slurmd` (both daemonize), ready once
`sinfo` shows the node idle; stopped by the pids in their pid files. Needs root and Debian's
`slurm-wlm` (`apt-get install -y slurm-wlm`): `missing()` says why it cannot run here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

BINARIES: Final = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
_READY_SECONDS: Final = 60.0
_STOP_SECONDS: Final = 30.0

_CONFIG: Final = """\
ClusterName=rb
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/ctld.pid
SlurmdPidFile={dir}/d.pid
SlurmctldLogFile={dir}/log/ctld.log
SlurmdLogFile={dir}/log/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node cluster: its config file and the environment its clients need."""

    directory: Path
    conf: Path

    @property
    def environ(self) -> dict[str, str]:
        """The process environment with SLURM_CONF pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def log_tail(self, chars: int = 2000) -> str:
        """The end of both daemons' logs (for a failing test's message)."""
        logs = [self.directory / "log" / name for name in ("ctld.log", "d.log")]
        return "\n".join(p.read_text(errors="replace")[-chars:] for p in logs if p.exists())


def missing() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    absent = [name for name in BINARIES if shutil.which(name) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm"
    if os.geteuid() != 0:
        return "the one-node Slurm cluster runs its daemons as root; these tests are not root"
    return None


def _free_port() -> int:
    # A port of our own, so a second cluster (another test session) does not collide.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_config(directory: Path) -> Path:
    for sub in ("state", "spool", "log"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    ctld_port = _free_port()
    d_port = _free_port()
    while d_port == ctld_port:
        d_port = _free_port()
    conf = directory / "slurm.conf"
    conf.write_text(
        _CONFIG.format(host=socket.gethostname(), dir=directory, ctld_port=ctld_port, d_port=d_port)
    )
    return conf


def _idle(env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == "idle"


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_SECONDS
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)  # a daemon that is not our child: poll until it is gone
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def running_cluster(directory: Path) -> Iterator[SlurmCluster]:
    """Start a one-node cluster in `directory`; stop both daemons when the block ends."""
    conf = _write_config(directory)
    cluster = SlurmCluster(directory, conf)
    env = cluster.environ
    try:
        subprocess.run(["slurmctld", "-c"], env=env, check=True, capture_output=True)
        subprocess.run(["slurmd"], env=env, check=True, capture_output=True)
        deadline = time.monotonic() + _READY_SECONDS
        while not _idle(env):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Slurm node never became idle:\n{cluster.log_tail()}")
            time.sleep(0.1)  # waiting on daemons we do not control: poll sinfo
        yield cluster
    finally:
        _stop(directory / "d.pid")
        _stop(directory / "ctld.pid")
