"""Start-up figures of the `raven-bot` command, as a person meets them: `version` and
`--help`, `chat` until its first prompt (in a terminal, default settings, offline), the idle
chat's resident memory, one-shot `memory add` / `memory search`, and the venv's size.

Each figure is the median of `--runs` (3) fresh processes in a fresh RAVEN_HOME, one after
the other. Run: `.venv/bin/python bench/startup.py` (or `make bench`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import pty
import select
import statistics
import subprocess
import tempfile
import time

from bench.lib.figures import goal

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
RAVEN = str(VENV / "bin" / "raven-bot")


def product_env(home: Path) -> dict[str, str]:
    """The environment of a person's shell: no keys or tokens, a RAVEN_HOME of its own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "SLACK_", "DISCORD_", "RAVEN_"))
    }
    env["RAVEN_HOME"] = str(home)
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds `argv` takes to exit."""
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - started


def chat_until_prompt(env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Seconds until `chat` shows `you> ` in a terminal, and its RSS (MB) once it has
    answered `status` and sat idle for a second."""
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
    try:
        while b"you> " not in seen:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                raise RuntimeError(f"no prompt within 60 s: {seen[-500:]!r}")
            seen += os.read(master, 4096)
        took = time.perf_counter() - started
        # The prompt shows before the runtime has loaded: RSS is read once a reply proves
        # it is serving, then idle (what it holds while waiting for a person).
        os.write(master, b"status\r")
        while b"queued" not in seen:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                raise RuntimeError(f"no reply to `status` within 60 s: {seen[-500:]!r}")
            seen += os.read(master, 4096)
        time.sleep(1.0)
        rss = _rss_mb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    return took, rss


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def venv_mb() -> float:
    """The whole venv's size on disk: what `make run` installs plus `make test`'s tools
    (mypy, ruff, pytest: the two commands share one venv)."""
    total = 0
    for root, _, files in os.walk(VENV):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                total += path.stat().st_blocks * 512
    return total / 1e6


def runtime_mb() -> float:
    """What the bot itself needs on disk: raven-bot's declared dependencies and theirs (no
    `dev` extra), the interpreter's own files and pip, as `pip install .` would lay them
    out. Measured in this venv from each installed distribution's file list."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    pending = ["raven-bot", "pip", "setuptools"]
    total = 0
    while pending:
        name = pending.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_blocks * 512
        for spec in dist.requires or ():
            req = Requirement(spec)
            # Only what is installed without extras (a marker naming an extra is left out).
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                pending.append(req.name)
    return total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        f"startup on CPython {sys.version.split()[0]}, {os.cpu_count()} CPU(s), "
        f"load average {os.getloadavg()[0]:.2f}; median of {args.runs} fresh processes"
    )
    figures: dict[str, list[float]] = {}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="raven-bench-start-") as tmp:
            home, cwd = Path(tmp) / "home", Path(tmp) / "cwd"
            cwd.mkdir()
            env = product_env(home)
            figures.setdefault("version", []).append(timed([RAVEN, "version"], env, cwd))
            figures.setdefault("--help", []).append(timed([RAVEN, "--help"], env, cwd))
            took, rss = chat_until_prompt(env, cwd)
            figures.setdefault("chat", []).append(took)
            figures.setdefault("rss", []).append(rss)
            add = [RAVEN, "memory", "add", "--user", "U1", "deep", "learning", "notes"]
            figures.setdefault("memory add", []).append(timed(add, env, cwd))
            search = [RAVEN, "memory", "search", "--user", "U1", "learning"]
            figures.setdefault("memory search", []).append(timed(search, env, cwd))
    med = {name: statistics.median(values) for name, values in figures.items()}
    rows = [
        # label, key, value, goal, unit, issue 22's figure when it was filed
        ("`raven-bot version`", "version", med["version"], 0.3, "s", 2.0),
        ("`raven-bot --help`", "--help", med["--help"], 0.3, "s", 2.0),
        ("`raven-bot chat` to its first prompt", "chat", med["chat"], 1.0, "s", 6.2),
        ("`memory add` from the shell", "memory add", med["memory add"], 1.5, "s", 7.0),
        ("`memory search` from the shell", "memory search", med["memory search"], 1.5, "s", 7.0),
        ("idle chat RSS", "rss", med["rss"], 250, "MB", 620),
        # 650: matplotlib (issue 41). The bot's own footprint, not `make test`'s tools.
        ("installed for the bot", "venv", runtime_mb(), 650, "MB", 1700),
    ]
    print(f"  (the whole venv, with make test's tools: {venv_mb():.0f} MB)")
    for label, _, value, limit, unit, baseline in rows:
        said = goal(f"start-up: {label}", value, limit, unit=unit, baseline=baseline)
        spread = ", ".join(f"{v:.2f}" for v in figures.get(_, []))
        print(
            f"  {label:<40} {value:8.2f} {unit:<2} (goal <= {limit:g} {unit}) {said}"
            + (f"  [{spread}]" if spread else "")
        )


if __name__ == "__main__":
    main()
