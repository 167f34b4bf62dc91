"""Benchmark: `raven-bot chat` until its first prompt with five MCP servers in mcp.json, against
the same with none, in one run.

Each run starts the real console (`.venv/bin/raven-bot chat`) in a pseudo-terminal in a fresh
RAVEN_HOME (default settings, no key, as `bench/startup.py` does) and times the spawn until
`you> ` shows. With **five servers**, RAVEN_HOME/mcp.json names five stdio copies of the
tests' loopback MCP server (`tests/fakes/mcp_server.py`); with **none** there is no mcp.json.
The servers connect in the background, so the prompt should not wait for them: the five-server
figure should be about the no-server one. The two kinds alternate, `--runs` (3) of each, and
each figure is the median.

So that the five-server figure is known to measure something, each five-server chat is then
watched (up to `--servers-within` seconds after the prompt) for the server processes it starts
(Python processes running the fake server below the chat's process): how many appeared, and
when the last of them did, from the spawn. If the first five-server chat starts none (mcp.json
not read by the chat), later ones are not watched and a line says so.

Goal (informational, never asserted): the first prompt ≤ 1 s with five servers. Every chat is
killed with its process group at the end of its run, and the servers it started (the SDK
starts each in a session of its own) by their ids. About 20 s (the five-server chats wait for
their servers). Run from the repo root:

    .venv/bin/python bench/mcp_chat_start.py [--runs 3] [--servers 5] [--servers-within 10]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import os
import pty
import select
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass

from bench.lib.figures import goal
from bench.startup import product_env

REPO = Path(__file__).resolve().parent.parent
RAVEN = str(REPO / ".venv" / "bin" / "raven-bot")
FAKE = str(REPO / "tests" / "fakes" / "mcp_server.py")
PROMPT = b"you> "
PROMPT_GOAL = 1.0  # seconds from spawn to the first prompt, five servers configured
WITHIN = 60.0  # hang guard for the prompt


@dataclass(frozen=True)
class Start:
    """One chat's figures: seconds to its prompt; the server processes it started (None:
    not watched) and seconds from spawn to the last of them."""

    prompt: float
    servers: int | None = None
    servers_at: float | None = None


def write_mcp_json(home: Path, count: int) -> None:
    """RAVEN_HOME/mcp.json with `count` stdio copies of the fake server (none: no file)."""
    if count == 0:
        return
    home.mkdir(parents=True, exist_ok=True)
    servers = {f"fake{n}": {"command": sys.executable, "args": [FAKE]} for n in range(1, count + 1)}
    (home / "mcp.json").write_text(json.dumps({"mcpServers": servers}, indent=2))


def descendants(root: int) -> set[int]:
    """Every process below `root` (the SDK starts a stdio server in a session of its own, so
    the chat's session or process group does not hold its servers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def is_server(pid: int) -> bool:
    """A Python process running the fake server (a sandbox's wrapper, whose argv also names
    the script, is not Python and not counted)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return FAKE.encode() in argv and Path(argv[0].decode(errors="replace")).name.startswith(
        "python"
    )


def end(pids: set[int]) -> None:
    """Kill processes the chat started that outlived it (servers in sessions of their own)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def chat_start(env: dict[str, str], cwd: Path, *, watch: int, within: float) -> Start:
    """Spawn `chat` in a terminal; seconds until its prompt. With `watch` > 0, then wait up to
    `within` s for that many server processes below it."""
    master, slave = pty.openpty()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [RAVEN, "chat"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    started_by_chat: set[int] = set()
    try:
        deadline = time.monotonic() + WITHIN
        while PROMPT not in seen:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RuntimeError(f"no prompt within {WITHIN:g} s: {seen[-800:]!r}")
            try:
                seen += os.read(master, 65536)
            except OSError as exc:  # EIO: the chat exited
                raise RuntimeError(f"chat exited before its prompt: {seen[-800:]!r}") from exc
        prompt = time.perf_counter() - started
        if watch == 0:
            return Start(prompt)
        count, last = 0, None
        until = time.monotonic() + within
        while time.monotonic() < until:
            below = descendants(proc.pid)
            started_by_chat |= below
            now = sum(1 for pid in below if is_server(pid))
            if now > count:
                count, last = now, time.perf_counter() - started
            if count >= watch:
                break
            time.sleep(0.02)  # polling the process table, not waiting for time to pass
        return Start(prompt, count, last)
    finally:
        started_by_chat |= descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the chat and its own process group
        proc.wait()
        end(started_by_chat)
        os.close(master)


def one_run(servers: int, *, watch: bool, within: float) -> Start:
    with tempfile.TemporaryDirectory(prefix="raven-bench-mcp-chat-") as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "cwd"
        cwd.mkdir()
        write_mcp_json(home, servers)
        return chat_start(product_env(home), cwd, watch=servers if watch else 0, within=within)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="chats of each kind, alternating")
    parser.add_argument("--servers", type=int, default=5, help="stdio servers in mcp.json")
    parser.add_argument(
        "--servers-within",
        type=float,
        default=10.0,
        help="seconds after the prompt to watch for the servers' processes",
    )
    args = parser.parse_args()
    print(
        f"mcp_chat_start on CPython {sys.version.split()[0]}, {os.cpu_count()} CPU(s), "
        f"load average {os.getloadavg()[0]:.2f}; median of {args.runs} fresh chats each, "
        "alternating"
    )
    none: list[Start] = []
    five: list[Start] = []
    watch = True
    for _ in range(args.runs):
        none.append(one_run(0, watch=False, within=0))
        five.append(one_run(args.servers, watch=watch, within=args.servers_within))
        if five[-1].servers == 0:
            watch = False  # the bot starts no servers: no use waiting for them again
    base = statistics.median(start.prompt for start in none)
    value = statistics.median(start.prompt for start in five)
    watched = [start for start in five if start.servers is not None]
    started = [start.servers_at for start in watched if start.servers_at is not None]
    print(f"  {'chat to its first prompt':<40} {'median':>7}   runs")
    for label, starts in (("no MCP servers", none), (f"{args.servers} stdio MCP servers", five)):
        spread = ", ".join(f"{start.prompt:.2f}" for start in starts)
        median = statistics.median(start.prompt for start in starts)
        print(f"  {label:<40} {median:7.2f} s [{spread}]")
    print(f"  {args.servers} servers ÷ none: {value / base:.2f}x ({(value - base) * 1000:+.0f} ms)")
    if watched and any(start.servers for start in watched):
        counts = ", ".join(str(start.servers) for start in watched)
        last = statistics.median(started) if started else float("nan")
        print(
            f"  server processes the chat started: [{counts}] of {args.servers}; the last one "
            f"{last:.2f} s after the spawn (median)"
        )
    else:
        print(
            f"  the chat started no MCP server process within {args.servers_within:g} s of its "
            "prompt (mcp.json not read by the chat, or its servers start only when first used): "
            "the five-server figure measures no server start"
        )
    said = goal(
        f"`chat` to its first prompt, {args.servers} MCP servers", value, PROMPT_GOAL, unit="s"
    )
    print(
        f"\ngoal (informational, never asserted): first prompt with {args.servers} servers "
        f"≤ {PROMPT_GOAL:g} s: {value:.2f} s {said}"
    )


if __name__ == "__main__":
    main()
