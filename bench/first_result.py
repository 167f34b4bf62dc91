"""A newcomer's first minutes, as README's "Two commands" walks them: `raven-bot chat` in a
terminal until its reply to `hello` (the offline notice), and until the first real result:
the plan `s1: shell: echo "hello from the sandbox" && uname -a`, an empty line, `1` to approve
(typed as soon as the prompt shows), and the command's output in the report.

Each figure is the median of `--runs` (3) fresh processes in a fresh RAVEN_HOME, default
settings, no key, in a pseudo-terminal. About 10 s.

With RAVEN_BENCH_INSTALL=1 it also times the whole path from a fresh clone: `git clone` of
this repo's committed HEAD into a temporary folder, `make install`, then the first real result
as above; once with an empty uv cache (cold: every package downloaded, as on a new machine)
and once more in a second clone with the cache the first one filled (warm). The cache is a
temporary folder: the machine's own (~/.cache/uv) is neither read nor changed. pip, which
fetches uv and the model wheel, keeps no cache on these machines. About a minute.

Run: `.venv/bin/python bench/first_result.py` (or `make bench`);
`RAVEN_BENCH_INSTALL=1 .venv/bin/python bench/first_result.py` for the install too."""

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
from bench.startup import product_env

REPO = Path(__file__).resolve().parent.parent
INSTALL_ENV = "RAVEN_BENCH_INSTALL"
PLAN = 's1: shell: echo "hello from the sandbox" && uname -a'
# What the sandboxed command prints (uname's output): neither the typed plan nor the
# approval prompt, which both show the command, contain it.
RESULT = b"GNU/Linux"


class Chat:
    """`raven-bot chat` in a pseudo-terminal, typed into as a person would."""

    def __init__(self, raven: Path, env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        self.started = time.perf_counter()
        self._proc = subprocess.Popen(
            [str(raven), "chat"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self._fd = master
        self._seen = b""
        self._mark = 0

    def type(self, line: str) -> None:
        """Type `line` and Enter; later waits look only at what the chat shows after it."""
        self._mark = len(self._seen)
        os.write(self._fd, line.encode() + b"\r")

    def wait_for(self, text: bytes, timeout: float = 60) -> float:
        """Seconds from the chat's start until `text` shows (after the last line typed)."""
        deadline = time.monotonic() + timeout
        while text not in self._seen[self._mark :]:
            ready, _, _ = select.select([self._fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RuntimeError(
                    f"{text!r} not shown within {timeout:g} s: {self._seen[-800:]!r}"
                )
            try:
                self._seen += os.read(self._fd, 65536)
            except OSError as exc:  # EIO: the chat exited
                raise RuntimeError(f"chat exited before {text!r}: {self._seen[-800:]!r}") from exc
        return time.perf_counter() - self.started

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()
        os.close(self._fd)


def first_reply(raven: Path, env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting `chat` to its reply to `hello`."""
    chat = Chat(raven, env, cwd)
    try:
        chat.wait_for(b"you> ")
        chat.type("hello")
        return chat.wait_for(b"offline mode")
    finally:
        chat.close()


def first_result(raven: Path, env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting `chat` to the README's plan's output, approved at once."""
    chat = Chat(raven, env, cwd)
    try:
        chat.wait_for(b"you> ")
        chat.type(PLAN)
        chat.type("")
        chat.wait_for(b"Approve")
        chat.type("1")
        return chat.wait_for(RESULT)
    finally:
        chat.close()


def from_clone(cache: Path, workdir: Path) -> tuple[float, float]:
    """A fresh clone of this repo's HEAD in `workdir`, `make install` with uv's cache in
    `cache`, then the first real result: (install seconds, seconds from the clone's start to
    the result)."""
    env = {**product_env(workdir / "home"), "UV_CACHE_DIR": str(cache)}
    env.pop("VIRTUAL_ENV", None)
    clone = workdir / "clone"
    started = time.perf_counter()
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], env=env, check=True)
    began = time.perf_counter()
    make = subprocess.run(
        ["make", "install"], cwd=clone, env=env, capture_output=True, text=True, check=False
    )
    if make.returncode != 0:
        raise RuntimeError(f"make install failed:\n{make.stdout[-2000:]}{make.stderr[-2000:]}")
    install = time.perf_counter() - began
    cwd = workdir / "cwd"
    cwd.mkdir()
    first_result(clone / ".venv" / "bin" / "raven-bot", env, cwd)
    return install, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        f"first result on CPython {sys.version.split()[0]}, {os.cpu_count()} CPU(s), "
        f"load average {os.getloadavg()[0]:.2f}; median of {args.runs} fresh processes"
    )
    raven = REPO / ".venv" / "bin" / "raven-bot"
    figures: dict[str, list[float]] = {"reply": [], "result": []}
    for _ in range(args.runs):
        for key, measure in (("reply", first_reply), ("result", first_result)):
            with tempfile.TemporaryDirectory(prefix="raven-bench-first-") as tmp:
                cwd = Path(tmp) / "cwd"
                cwd.mkdir()
                figures[key].append(measure(raven, product_env(Path(tmp) / "home"), cwd))
    # label, value (s), goal (s), issue 39's figure when it was filed, the runs' values
    rows: list[tuple[str, float, float, float | None, list[float]]] = [
        (
            "`chat` to its reply to `hello`",
            statistics.median(figures["reply"]),
            2.0,
            None,
            figures["reply"],
        ),
        (
            "`chat` to the first real result",
            statistics.median(figures["result"]),
            5.0,
            None,
            figures["result"],
        ),
    ]
    if os.environ.get(INSTALL_ENV) == "1":
        with tempfile.TemporaryDirectory(prefix="raven-bench-install-") as tmp:
            cache = Path(tmp) / "uv-cache"
            for warmth in ("cold", "warm"):
                workdir = Path(tmp) / warmth
                workdir.mkdir()
                install, total = from_clone(cache, workdir)
                print(f"  `make install` in a fresh clone, {warmth} uv cache: {install:.1f} s")
                rows.append(
                    (
                        f"fresh clone to the first real result, {warmth} cache",
                        total,
                        45.0,
                        110.0 if warmth == "cold" else None,
                        [],
                    )
                )
    else:
        print(f"  (install from a fresh clone: set {INSTALL_ENV}=1, about a minute)")
    for label, value, limit, baseline, spread in rows:
        said = goal(f"first result: {label}", value, limit, unit="s", baseline=baseline)
        shown = ", ".join(f"{v:.2f}" for v in spread)
        print(
            f"  {label:<52} {value:7.2f} s (goal <= {limit:g} s) {said}"
            + (f"  [{shown}]" if shown else "")
        )


if __name__ == "__main__":
    main()
