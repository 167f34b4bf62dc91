"""Reading and signalling local processes through /proc (Linux), guarded against pid reuse.

A process is named by its pid *and* its start time (field 22 of /proc/<pid>/stat): a pid that
now belongs to another process has another start time. All of this blocks: call it in a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_PROC: Final = Path("/proc")
_ENDED_STATES: Final = frozenset({"Z", "X", "x"})  # zombie or dead: exited, not yet reaped


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it."""

    pid: int
    ppid: int
    state: str
    start: str
    name: str = ""  # comm: the executable's name, as the process may have set it

    @property
    def running(self) -> bool:
        """False once it has exited (a zombie has exited; only its entry is left)."""
        return self.state not in _ENDED_STATES


def read_proc(pid: int) -> Proc | None:
    """The process `pid`, or None when there is none."""
    try:
        text = (_PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    # comm (field 2) is in parentheses and may itself contain spaces or ")".
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    if len(fields) < 20:
        return None
    name = head.partition("(")[2]
    return Proc(pid=pid, ppid=int(fields[1]), state=fields[0], start=fields[19], name=name)


def alive(pid: int, start: str) -> bool:
    """True while the process `pid` that started at `start` has not exited."""
    proc = read_proc(pid)
    return proc is not None and proc.start == start and proc.running


def descendants(pid: int) -> list[Proc]:
    """Every live process below `pid` (children first), by a scan of /proc."""
    children: defaultdict[int, list[Proc]] = defaultdict(list)
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (proc := read_proc(int(entry.name))) is not None:
            children[proc.ppid].append(proc)
    found: list[Proc] = []
    frontier = [pid]
    while frontier:
        below = [c for p in frontier for c in children.get(p, ())]
        found += [c for c in below if c.running]
        frontier = [c.pid for c in below]
    return found


def send(procs: list[Proc], sig: signal.Signals) -> None:
    """Send `sig` to each process that is still the one we saw (same start time)."""
    for proc in procs:
        if alive(proc.pid, proc.start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)
