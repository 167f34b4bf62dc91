"""Reading a file a sandboxed process may have tampered with: only a regular file, reached
without following a link anywhere on its path.

A sandboxed agent writes into the conversation's workspace and the run's records; it may
plant a symbolic link there (`report.md -> ~/.ssh/id_rsa`) hoping the bot uploads what the
link points at. Every component is checked with `lstat` against the resolved path, and the
file itself is opened with O_NOFOLLOW, so a link swapped in after the check fails the open.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeFile(OSError):
    """The path is a link, passes through one, is no regular file, or is bigger than allowed."""


def link_free(path: Path) -> bool:
    """True when `path` is absolute and no component of it is a symbolic link."""
    if not path.is_absolute():
        return False
    return os.path.realpath(path) == os.path.normpath(path)


def regular_size(path: Path) -> int:
    """The size of the regular file at `path`, reached without links; raises UnsafeFile."""
    if not link_free(path):
        raise UnsafeFile(f"{path} is reached through a symbolic link")
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFile(f"{path} is not a regular file")
    return info.st_size


def read_regular(path: Path, *, limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them (UnsafeFile when it is
    bigger: a file that grew is not sent cut short). Links are never followed."""
    if not link_free(path):
        raise UnsafeFile(f"{path} is reached through a symbolic link")
    # O_NONBLOCK: a FIFO planted under the name would otherwise block the open.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise UnsafeFile(f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{path} is bigger than the {limit} bytes recorded for it")
    return data


__all__ = ["UnsafeFile", "link_free", "read_regular", "regular_size"]
