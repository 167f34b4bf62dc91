"""The detached leader of a local round, run as `python -I -S _runner.py LOG EXIT -- ARGV`.

It forks the leader and prints `<pid> <starttime>` (the start time guards against pid reuse),
then exits, so the bot never waits on the round. The leader starts a session of its own, becomes
a child subreaper (anything the command leaves behind, including a sandbox whose outer bwrap
died, is re-parented to it rather than lost), runs ARGV with stdout and stderr appended to LOG,
and once nothing of the round is left writes the exit code to EXIT atomically. Stdlib only.

The leader runs outside the sandbox, as the bot's user: it opens LOG and writes EXIT relative to
their directory's descriptor without following symlinks (O_NOFOLLOW, O_EXCL for the temporary
file), so nothing planted in the round directory can make it write to another file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import subprocess
import sys
from typing import BinaryIO, Final

_PR_SET_CHILD_SUBREAPER: Final = 36
_EXEC_FAILED: Final = 127


def start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat: the process's start, in clock ticks since boot."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        return stat.read().rpartition(")")[2].split()[19]


def run(log: str, exit_path: str, argv: list[str]) -> int:
    """The leader: run argv, reap everything it leaves, then record the exit code."""
    # A SIGTERM to the round is meant for the command: the leader outlives it to record the
    # code. A handler (not SIG_IGN) so the command itself gets the default disposition.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: None)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    with _open_log(log) as out:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        except OSError as exc:
            out.write(f"raven: could not start the round: {exc}\n".encode())
            return _record(exit_path, _EXEC_FAILED)
    code = _reap_all(child.pid)
    return _record(exit_path, code)


def _reap_all(first: int) -> int:
    """Wait for every child (adopted ones included); the first child's status is the code."""
    code = _EXEC_FAILED
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return code
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        if pid == first:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as sh does


def _open_log(log: str) -> BinaryIO:
    """LOG opened to append: created if missing, refused if not a regular file with one link."""
    directory, name = os.path.split(log)
    dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(name, flags | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise OSError(f"{log} is not a regular file with a single link: refusing to write it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab", buffering=0)


def _record(exit_path: str, code: int) -> int:
    """Write the code to a fresh temporary file, then rename it over EXIT (no symlink followed)."""
    directory, name = os.path.split(exit_path)
    tmp = f"{name}.tmp"
    dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)  # unlink never follows a symlink
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(f"{code}\n")
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return 0


def main(args: list[str]) -> int:
    """Fork the leader, print its pid and start time, return at once."""
    if len(args) < 4 or args[2] != "--":
        print("usage: _runner.py LOG EXIT -- ARGV...", file=sys.stderr)
        return 2
    log, exit_path, argv = args[0], args[1], args[3:]
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.setsid()  # its own session and process group, apart from the bot's
        # The bot reads our stdout to EOF: the leader must not hold it (or stderr) open.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            run(log, exit_path, argv)
        except BaseException:
            # Still say the round ended, so it is not mistaken for one that vanished.
            with contextlib.suppress(BaseException):
                _record(exit_path, _EXEC_FAILED)
        os._exit(0)
    # Read before exiting: until we do, the leader cannot be reaped, so its entry exists.
    print(f"{pid} {start_time(pid)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
