"""What every machine shares: the round's file names, its environment, bounded log reads.

A round's directory holds `round.log` (stdout and stderr, appended) and `exit_code`, written
atomically (a temporary file renamed into place) when the command ends, so a reader never sees a
partial code and a job's end is known even after its scheduler or parent has forgotten it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from oncall.model import JobRequest, JobStatus, MachineSpec, MachineUnavailable

LOG_NAME: Final = "round.log"
EXIT_NAME: Final = "exit_code"
# One read_log call returns at most this much; the monitor calls again for the rest.
MAX_LOG_CHUNK: Final = 1 << 20
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# The variables a round (and the ssh/slurm client commands) may see from the bot's environment.
BASE_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME")
# Same rule as the agent sandbox: names that may hold credentials never reach a round.
_SECRET_NAME: Final = re.compile(
    r"TOKEN|SECRET|KEY|PASSWORD|^SLACK_|^DISCORD_|^ANTHROPIC_|^RAVEN_", re.I
)


def round_env(environ: Mapping[str, str], *, allow: Iterable[str] = ()) -> dict[str, str]:
    """The base variables plus `allow` from `environ`, minus anything that looks secret."""
    env = {
        name: environ[name]
        for name in (*BASE_ENV, *allow)
        if name in environ and not _SECRET_NAME.search(name)
    }
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def round_dir(spec: MachineSpec, request: JobRequest) -> PurePosixPath:
    """Where the round runs: under the machine's `workdir` if it has one, else the request's."""
    if spec.workdir is None:
        return PurePosixPath(request.workdir)
    return PurePosixPath(spec.workdir) / request.campaign_id / f"round-{request.round}"


def read_chunk(path: Path, offset: int, limit: int = MAX_LOG_CHUNK) -> bytes:
    """Up to `limit` bytes of `path` from `offset`; empty when missing or nothing new (blocking)."""
    try:
        with path.open("rb") as log:
            log.seek(max(offset, 0))
            return log.read(limit)
    except FileNotFoundError:
        return b""


def read_exit_file(path: Path) -> str | None:
    """The text of an exit-code file, or None while the job has not ended (blocking)."""
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None


def exited(text: str, *, detail: str = "") -> JobStatus:
    """The status an exit-code file's text means (a garbled file still means "ended")."""
    try:
        return JobStatus(state="exited", exit_code=int(text.strip()), detail=detail)
    except ValueError:
        note = f"the exit-code file holds {text.strip()[:40]!r}, not a number"
        return JobStatus(state="exited", detail=f"{detail}; {note}" if detail else note)


def minutes(seconds: float) -> int:
    """A time limit in whole minutes, rounded up, at least one."""
    return max(1, math.ceil(seconds / 60))


def split_job_id(job_id: str) -> tuple[int, str]:
    """A `pid:starttime` job id as (pid, starttime); starttime is "-" when unknown."""
    pid, sep, start = job_id.partition(":")
    if not sep or not pid.isdigit() or not start:
        raise ValueError(f"not a pid:starttime job id: {job_id!r}")
    return int(pid), start


async def run_client(
    argv: Sequence[str], *, env: Mapping[str, str], seconds: float, where: str, silence: str
) -> tuple[int, bytes, bytes]:
    """Run a client command (ssh, sbatch, …): (exit code, stdout, stderr).

    `MachineUnavailable` when it cannot start (naming `where`) or says nothing within
    `seconds` (`silence` describes who did not answer); the hung process is killed.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise MachineUnavailable(f"{where}: cannot run {argv[0]}: {exc}") from exc
    try:
        async with asyncio.timeout(seconds):
            out, err = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise MachineUnavailable(f"{where}: {silence} within {seconds:.0f} s") from None
    return (proc.returncode if proc.returncode is not None else -1), out, err
