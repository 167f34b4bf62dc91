"""What every machine shares: the round's file names, its environment, bounded log reads.

A round's directory holds `round.log` (stdout and stderr, appended), `exit_code`, written
atomically (a temporary file renamed into place) when the command ends, so a reader never sees a
partial code and a job's end is known even after its scheduler or parent has forgotten it, and,
for a campaign without a working directory of its own, `work/`, where its command runs. The
command's working directory (the user's project) is elsewhere and is the only place it may
write; the control files are where the sandboxed command cannot reach them. The bot still opens
them without following symlinks and reads only a regular file with a single link (a FIFO, a
symlink or a hard link planted there is ignored): a round run without a sandbox could plant one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from core.secret_names import SecretNames
from core.spawn import kill_process, start_uncancelled
from oncall.model import JobRequest, JobStatus, MachineSpec, MachineUnavailable

LOG_NAME: Final = "round.log"
EXIT_NAME: Final = "exit_code"
WORK_NAME: Final = "work"  # the command's working directory: the only path it may write
# Left by an interrupted write of the exit code; removed before a round starts.
EXIT_TMP_NAME: Final = f"{EXIT_NAME}.tmp"
# One read_log call returns at most this much; the monitor calls again for the rest.
MAX_LOG_CHUNK: Final = 1 << 20
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# The variables a round (and the ssh/slurm client commands) may see from the bot's environment.
BASE_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME")


def round_env(
    environ: Mapping[str, str], *, secret_names: SecretNames, allow: Iterable[str] = ()
) -> dict[str, str]:
    """The base variables plus `allow` from `environ`, minus anything `secret_names` calls
    secret (the same rule as the agent sandbox) and the bot's own `RAVEN_*` settings."""
    env = {
        name: environ[name]
        for name in (*BASE_ENV, *allow)
        if name in environ
        and not secret_names.looks_secret(name)
        and not name.upper().startswith("RAVEN_")
    }
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def round_dir(spec: MachineSpec, request: JobRequest) -> PurePosixPath:
    """The round's directory on this host (log, exit code): the request's, under
    RAVEN_HOME/campaigns/ (a machine's `workdir` is where commands run, not where rounds are
    kept, so a command never reaches its round's control files)."""
    return PurePosixPath(request.workdir)


def work_dir(directory: Path) -> Path:
    """The command's working directory inside a round directory."""
    return directory / WORK_NAME


def command_dir(spec: MachineSpec, request: JobRequest, directory: Path) -> Path:
    """Where a local or Slurm round's command runs (blocking): the campaign's working
    directory, resolved, else the round directory's `work/`; `MachineUnavailable` when the
    working directory is missing or not a directory."""
    if request.cwd is None:
        return work_dir(directory)
    path = Path(request.cwd)
    if not path.is_absolute():
        raise MachineUnavailable(f"{spec.name}: the workdir {request.cwd} is not absolute")
    if not path.is_dir():
        raise MachineUnavailable(
            f"{spec.name}: the workdir {request.cwd} does not exist or is not a directory: "
            "create it, or set `workdir` in machines.toml to one that exists"
        )
    resolved = path.resolve()
    if resolved == directory or resolved in directory.parents:
        # It would give the command the round's log and exit code to rewrite.
        raise MachineUnavailable(
            f"{spec.name}: the workdir {request.cwd} contains the round directory {directory}"
        )
    return resolved


def prepare_round_dir(directory: Path, *, work: bool = True) -> Path:
    """Create the round directory and (with `work`) its `work/` (blocking); the directory's
    absolute path.

    Drops an exit code left by an earlier run and anything in place of a control file that is
    not a plain file, without following a symlink; a `work` that is not a real directory (a
    symlink would make the sandbox bind its target writable) is replaced by an empty one.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in (EXIT_NAME, EXIT_TMP_NAME):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
        if not _plain_file(fd, LOG_NAME):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(LOG_NAME, dir_fd=fd)
        if not work:
            return directory
        try:
            info = os.stat(WORK_NAME, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            os.unlink(WORK_NAME, dir_fd=fd)
            info = None
        if info is None:
            os.mkdir(WORK_NAME, dir_fd=fd)
    finally:
        os.close(fd)
    return directory


def _plain_file(dir_fd: int, name: str) -> bool:
    """Whether `name` is missing or a regular file with one link (not followed if a symlink)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def open_control(path: Path) -> int | None:
    """A read-only descriptor of the control file `path`, or None when it is missing or is not
    a regular file with a single link (blocking; the caller closes the descriptor).

    The last component is opened relative to its directory without following a symlink and
    without blocking on a FIFO, then checked with fstat: nothing in the round directory can
    redirect the read to another file, or hang the bot.
    """
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open(path.name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.ENOTDIR):
            return None  # missing, or a symlink (ELOOP under O_NOFOLLOW), or a socket
        raise
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return fd
    os.close(fd)
    return None


def read_chunk(path: Path, offset: int, limit: int = MAX_LOG_CHUNK) -> bytes:
    """Up to `limit` bytes of `path` from `offset` (blocking); empty when missing, not a plain
    file (see `open_control`), or nothing new."""
    fd = open_control(path)
    if fd is None:
        return b""
    try:
        return os.pread(fd, limit, max(offset, 0))
    finally:
        os.close(fd)


# An exit-code file holds a number and a newline; anything longer is garbled anyway.
_EXIT_FILE_LIMIT: Final = 64


def read_exit_file(path: Path) -> str | None:
    """The text of an exit-code file, or None while the job has not ended (blocking).

    A control file that is not a plain file (see `open_control`) counts as not written yet.
    """
    fd = open_control(path)
    if fd is None:
        return None
    try:
        return os.pread(fd, _EXIT_FILE_LIMIT, 0).decode("ascii", errors="replace")
    finally:
        os.close(fd)


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
        proc = await start_uncancelled(
            asyncio.create_subprocess_exec(
                *argv,
                env=dict(env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            ),
            kill_process,
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
