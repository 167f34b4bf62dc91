"""Sandboxes for agent subprocesses (CLI agents and `run_shell`): bubblewrap, or refusal.

A `Sandbox` turns a command and a workspace into what actually runs. `Bubblewrap` builds the
child's filesystem from explicit read-only binds of the system, a fresh /tmp and $HOME, and the
workspace as the only writable path; the bot's data directory and working directory (`.env`)
are covered, and the child gets its own PID namespace tied to the bot's lifetime. A *detached*
launch (an oncall round) keeps every confinement but is not tied to the bot: it survives a bot
restart. Without bubblewrap, `Refusing` refuses every command, unless the operator opted out with
`RAVEN_UNSANDBOXED=1` (`Unsandboxed`, unsafe).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, NamedTuple, Protocol, TypeVar

from core.sandbox_view import HIDDEN_FILES, SYSTEM_PATHS

SandboxKind = Literal["bwrap", "unsandboxed", "refusing"]
Which = Callable[[str], str | None]
_T = TypeVar("_T")

INSTALL_HINT: Final = (
    "Install bubblewrap (`apt-get install bubblewrap`), or set RAVEN_UNSANDBOXED=1 to run agent "
    "commands without a sandbox (unsafe: they can then read the bot's secrets and files)."
)
_PROBE_TIMEOUT_SECONDS: Final = 20.0
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# Interpreters commands call by their usual name, and the versioned name hosts ship them as
# (Debian has `python3` and no `python`): the sandbox links the first to the second.
INTERPRETER_ALIASES: Final = (("python", "python3"), ("pip", "pip3"))
# Where those links live inside the sandbox (its own root tmpfs; nothing of the host's).
SHIM_DIR: Final = "/run/raven/bin"
_PR_SET_PDEATHSIG: Final = 1


class SandboxUnavailable(RuntimeError):
    """No sandbox can run this command; the message says how to fix it."""


@dataclass(frozen=True)
class Launch:
    """What to execute: the (wrapped) argv and a hook run in the child before exec."""

    argv: tuple[str, ...]
    preexec: Callable[[], None] | None = None


class Sandbox(Protocol):
    """Wraps a command so it runs confined to a workspace."""

    @property
    def kind(self) -> SandboxKind:
        """Which sandbox this is (for doctor, logs and tests)."""
        ...

    @property
    def description(self) -> str:
        """One line for doctor and the startup log."""
        ...

    def launch(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        detached: bool = False,
        readonly: Sequence[Path] = (),
        network: bool = True,
    ) -> Launch:
        """The command to execute for `argv` in `workspace`; `SandboxUnavailable` if refused.

        `detached`: the command is not tied to the bot's lifetime (it survives a restart).
        `readonly`: extra directories the command may read (bound read-only, same path).
        `network`: False cuts the command off every network, loopback included.
        """
        ...


class _Mount(NamedTuple):
    """One mount for bwrap: where it lands, its rank among equally deep mounts, its options."""

    path: Path
    rank: int
    args: list[str]


# Ranks order mounts of equal depth: binds, then symlinks, fresh dirs, covers, the workspace.
_RANK_BIND: Final = 0
_RANK_SYMLINK: Final = 1
_RANK_FRESH: Final = 2
_RANK_COVER: Final = 3
_RANK_WORKSPACE: Final = 4

_DIE_WITH_PARENT: Final = "--die-with-parent"
_ISOLATION_ARGS: Final = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    # The whole sandbox dies with its parent (SIGKILL included): bwrap sets PDEATHSIG on
    # itself and its init, and the PID namespace takes every descendant with it. The parent
    # is the bot, or for a detached launch the round's leader (which outlives the bot): a
    # round whose leader was killed must not run on unwatched.
    _DIE_WITH_PARENT,
    "--new-session",  # no controlling terminal to inject keystrokes into
    "--cap-drop",
    "ALL",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
)


@dataclass(frozen=True)
class Bubblewrap:
    """bubblewrap: own PID namespace, explicit read-only root, workspace the only writable path."""

    bwrap: str
    # Paths the child must not see (data dir, the bot's working directory); covered by tmpfs.
    hidden: tuple[Path, ...] = ()
    # Extra read-only paths (the Python installation running the bot, so `python3` works).
    readonly: tuple[Path, ...] = ()

    @property
    def kind(self) -> SandboxKind:
        """Always "bwrap"."""
        return "bwrap"

    @property
    def description(self) -> str:
        """Names the binary and what is hidden."""
        hidden = ", ".join(str(p) for p in self.hidden) or "nothing"
        return f"bubblewrap ({self.bwrap}); hidden from agents: {hidden}"

    def launch(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        detached: bool = False,
        readonly: Sequence[Path] = (),
        network: bool = True,
    ) -> Launch:
        """bwrap arguments around argv; the environment is passed by exec, never on argv."""
        # Never as --setenv: argv is world-readable in /proc, an agent's own key is not.
        args = self.arguments(workspace, env, detached=detached, readonly=readonly)
        cut = () if network else ("--unshare-net",)
        return Launch((self.bwrap, *cut, *args, "--", *argv))

    def arguments(
        self,
        workspace: Path,
        env: Mapping[str, str],
        *,
        detached: bool = False,
        readonly: Sequence[Path] = (),
    ) -> list[str]:
        """The bwrap options (without the command) for one run in `workspace`.

        `detached` changes nothing here: a detached command's parent is its leader, not the
        bot, and the sandbox dies with that parent like any other.
        `readonly` adds read-only binds (a campaign machine's `mounts`), laid like the
        workspace over any cover (a mount inside a hidden directory stays visible).
        """
        ws = workspace.resolve()
        fresh = _fresh_mounts(env)
        # The workspace is never covered, even when it is a hidden directory (the operator's
        # explicit choice of the bot's own directory for a campaign).
        covered = self._covered_dirs([*(mount.path for mount in fresh), ws])
        shims = interpreter_shims(env.get("PATH", ""), visible=self._visible_roots())
        mounts = [
            *_system_mounts(),
            *self._readonly_mounts(),
            *_extra_mounts(readonly, ws),
            *(
                _Mount(
                    Path(SHIM_DIR) / name,
                    _RANK_SYMLINK,
                    ["--symlink", target, f"{SHIM_DIR}/{name}"],
                )
                for name, target in shims
            ),
            *fresh,
            *_hidden_file_mounts(),
            *(_Mount(path, _RANK_COVER, ["--tmpfs", str(path)]) for path in covered),
            _Mount(ws, _RANK_WORKSPACE, ["--bind", str(ws), str(ws)]),
        ]
        # Parents first, so a deeper mount always lands on top (the workspace inside a
        # hidden data dir stays visible and writable); the rank orders equal depths.
        mounts.sort(key=lambda mount: (len(mount.path.parts), mount.rank))
        args = list(_ISOLATION_ARGS)
        for mount in mounts:
            args += mount.args
        for path in covered:
            # Read-only once everything is mounted: a write there fails instead of vanishing.
            args += ["--remount-ro", str(path)]
        if "TMPDIR" in env:  # the host's TMPDIR is not mounted; /tmp is the fresh one
            args += ["--setenv", "TMPDIR", "/tmp"]
        if shims:  # last on PATH: an interpreter the host has under its own name comes first
            args += ["--setenv", "PATH", f"{env.get('PATH') or DEFAULT_PATH}:{SHIM_DIR}"]
        return [*args, "--chdir", str(ws)]

    def _visible_roots(self) -> tuple[Path, ...]:
        """Where the sandbox shows the host's files: the system paths and the extra binds."""
        return (*(Path(p) for p in SYSTEM_PATHS), *(p.resolve() for p in self.readonly))

    def shows(self, path: Path, env: Mapping[str, str]) -> bool:
        """Whether a command started with `env` sees `path` (outside its workspace): the
        deepest mount over the real path decides, as in `arguments`."""
        target = path.resolve()
        fresh = _fresh_mounts(env)
        mounts = [
            *_system_mounts(),
            *self._readonly_mounts(),
            *fresh,
            *_hidden_file_mounts(),
            *(_Mount(p, _RANK_COVER, []) for p in self._covered_dirs([m.path for m in fresh])),
        ]
        mounts.sort(key=lambda mount: (len(mount.path.parts), mount.rank))
        shown = False  # bwrap's root is empty: what no mount covers does not exist
        for mount in mounts:
            if mount.path == target or mount.path in target.parents:
                shown = mount.rank == _RANK_BIND
        return shown

    def _readonly_mounts(self) -> list[_Mount]:
        """Read-only binds of the extra paths that exist as directories."""
        return [
            _Mount(extra, _RANK_BIND, ["--ro-bind", str(extra), str(extra)])
            for extra in _unique(p.resolve() for p in self.readonly)
            if extra.is_dir()
        ]

    def _covered_dirs(self, fresh: Sequence[Path]) -> list[Path]:
        """The hidden directories to cover with an empty tmpfs."""
        return [
            path
            for path in _unique(p.resolve() for p in self.hidden)
            # /tmp and $HOME are fresh (and must stay writable) already.
            if path != Path("/") and path not in fresh and path.is_dir()
        ]


@dataclass(frozen=True)
class Unsandboxed:
    """The operator's explicit opt-out (RAVEN_UNSANDBOXED=1): plain exec, unsafe."""

    @property
    def kind(self) -> SandboxKind:
        """Always "unsandboxed"."""
        return "unsandboxed"

    @property
    def description(self) -> str:
        """Says plainly that this is unsafe."""
        return (
            "disabled by RAVEN_UNSANDBOXED=1: agent commands run unsandboxed and can read the "
            "bot's secrets and files (unsafe)"
        )

    def launch(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        detached: bool = False,
        readonly: Sequence[Path] = (),
        network: bool = True,
    ) -> Launch:
        """argv unchanged; the child is SIGKILLed if the bot dies (unless detached)."""
        if not network:
            raise SandboxUnavailable(
                "Refused: this agent is configured without network (`network = false`), which "
                "only the sandbox can enforce, and RAVEN_UNSANDBOXED=1 turned it off. "
                + INSTALL_HINT
            )
        if detached:
            return Launch(tuple(argv))
        return Launch(tuple(argv), die_with_parent_hook(os.getpid()))


@dataclass(frozen=True)
class Refusing:
    """No sandbox and no opt-out: every command is refused with how to fix it."""

    reason: str

    @property
    def kind(self) -> SandboxKind:
        """Always "refusing"."""
        return "refusing"

    @property
    def description(self) -> str:
        """Why there is no sandbox."""
        return f"unavailable ({self.reason}): CLI agents and run_shell refuse to run"

    def launch(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        detached: bool = False,
        readonly: Sequence[Path] = (),
        network: bool = True,
    ) -> Launch:
        """Always raises `SandboxUnavailable` (detached or not)."""
        raise SandboxUnavailable(
            f"Refused: no sandbox is available to run agent commands ({self.reason}). "
            + INSTALL_HINT
        )


@dataclass(frozen=True)
class DetachedSandbox:
    """A sandbox in its detached mode, as a plain argv wrapper: campaign rounds run confined
    but are not tied to the bot's lifetime (they survive a restart)."""

    sandbox: Sandbox

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        readonly: Sequence[Path] = (),
    ) -> Sequence[str]:
        """The confined argv for one detached command (`readonly`: extra read-only binds)."""
        return self.sandbox.launch(
            argv, workspace=workspace, env=env, detached=True, readonly=readonly
        ).argv


def shown_by(sandbox: Sandbox, environ: Mapping[str, str]) -> Callable[[Path], bool]:
    """Whether a path is visible to commands in `sandbox` started from `environ` (its HOME
    is replaced by an empty one). Without bubblewrap everything counts as visible: the
    opt-out sees the host, and refusal refuses every command with its own reason."""
    if not isinstance(sandbox, Bubblewrap):
        return lambda path: True
    env = dict(environ)
    return lambda path: sandbox.shows(path, env)


def die_with_parent_hook(parent: int) -> Callable[[], None]:
    """A preexec hook: PR_SET_PDEATHSIG(SIGKILL), so the child dies when the bot does.

    This covers the direct child only: its own children are not killed when the bot dies
    (bubblewrap's PID namespace is what covers a whole tree). The kernel sends the signal when
    the forking *thread* exits; children are started from the event loop's thread, which
    lives as long as the bot.
    """
    # Resolved here, before fork: the child only makes the call.
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def hook() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent:  # the bot died between fork and prctl
            os._exit(137)

    return hook


def probe(sandbox: Bubblewrap) -> str | None:
    """Run `true` in the sandbox once; None when it works, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="raven-sandbox-probe-") as tmp:
        launch = sandbox.launch(["true"], workspace=Path(tmp), env={"PATH": "/usr/bin:/bin"})
        try:
            done = subprocess.run(
                launch.argv,
                capture_output=True,
                timeout=_PROBE_TIMEOUT_SECONDS,
                env={"PATH": "/usr/bin:/bin"},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{sandbox.bwrap} could not run: {exc}"
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()[-300:]
        return f"{sandbox.bwrap} failed its startup check (exit {done.returncode}): {err}"
    return None


def select_sandbox(
    *,
    hidden: Sequence[Path],
    unsandboxed: bool,
    which: Which = shutil.which,
    check: Callable[[Bubblewrap], str | None] = probe,
) -> Sandbox:
    """The sandbox this process uses: bubblewrap if it works, the opt-out, or refusal."""
    if unsandboxed:
        return Unsandboxed()
    found = which("bwrap")
    if found is None:
        return Refusing("bubblewrap (`bwrap`) is not installed")
    sandbox = Bubblewrap(
        found,
        hidden=tuple(hidden),
        readonly=tuple(Path(p) for p in _unique([sys.prefix, sys.base_prefix])),
    )
    problem = check(sandbox)
    return sandbox if problem is None else Refusing(problem)


def interpreter_shims(path: str, *, visible: Sequence[Path]) -> list[tuple[str, str]]:
    """(name, target) for each interpreter the sandbox lacks under its usual name but has
    under its versioned one (`python` → `python3`): what to link into `SHIM_DIR`.

    Only PATH directories the sandbox shows (under `visible`) count, so a `python` in a
    hidden home directory (pyenv's shims, say) does not hide the missing one."""
    shown = os.pathsep.join(
        d
        for d in (path or DEFAULT_PATH).split(os.pathsep)
        if d.startswith("/") and any(Path(d) == r or r in Path(d).parents for r in visible)
    )
    shims = []
    for name, versioned in INTERPRETER_ALIASES:
        if shutil.which(name, path=shown) is not None:
            continue
        target = shutil.which(versioned, path=shown)
        if target is not None:
            shims.append((name, target))
    return shims


def _extra_mounts(readonly: Sequence[Path], workspace: Path) -> list[_Mount]:
    """Read-only binds of the extra directories (missing ones skipped; the workspace itself
    stays writable)."""
    return [
        _Mount(path, _RANK_WORKSPACE, ["--ro-bind", str(path), str(path)])
        for path in _unique(p.resolve() for p in readonly)
        if path.is_dir() and path != workspace
    ]


def _system_mounts() -> list[_Mount]:
    """The read-only system view: each system path bound, or recreated if it is a symlink."""
    mounts: list[_Mount] = []
    for name in SYSTEM_PATHS:
        path = Path(name)
        if path.is_symlink():
            mounts.append(_Mount(path, _RANK_SYMLINK, ["--symlink", os.readlink(path), name]))
        elif path.is_dir():
            mounts.append(_Mount(path, _RANK_BIND, ["--ro-bind", name, name]))
    return mounts


def _fresh_mounts(env: Mapping[str, str]) -> list[_Mount]:
    """Empty, writable /tmp and $HOME (when HOME is an absolute path other than /)."""
    mounts = [_Mount(Path("/tmp"), _RANK_FRESH, ["--tmpfs", "/tmp"])]
    home = env.get("HOME", "")
    if home.startswith("/") and Path(home) != Path("/"):
        mounts.append(_Mount(Path(home), _RANK_FRESH, ["--tmpfs", home]))
    return mounts


def _hidden_file_mounts() -> list[_Mount]:
    """Credential files under the system paths, each replaced by an empty file."""
    return [
        _Mount(Path(secret), _RANK_COVER, ["--ro-bind", "/dev/null", secret])
        for secret in HIDDEN_FILES
        if Path(secret).is_file()
    ]


def _unique(items: Iterable[_T]) -> list[_T]:
    return list(dict.fromkeys(items))
