"""The shell function that confines a remote round (Slurm batch jobs, ssh hosts).

`confine_function` returns POSIX sh defining `raven_confined WORK COMMAND`: it runs COMMAND with
`sh -c` in WORK with a scrubbed environment (`env -i`: PATH, HOME, the locale, the user's name
and the scheduler's own job variables; nothing of the bot's), and, when `bwrap` is on the node,
inside bubblewrap shaped like the local sandbox: its own PID namespace (so /proc shows no other
process and no other process's environ), a read-only system view, fresh /tmp and $HOME, the
credential files and the `hidden` directories (RAVEN_HOME, the bot's working directory) covered,
WORK the only writable path and the machine's `mounts` read-only; where the node has `python3`
but no `python`, `python` is linked to it inside the sandbox. Without bwrap it refuses or runs
scrubbed only, as the machine says (`BwrapMissing`). Its status is the command's exit code.

bubblewrap itself ignores SIGTERM and SIGHUP (it would die of them and leave the command
behind), while `env --default-signal` restores them for the command, so a cancel reaches the
command as a SIGTERM it may handle; bwrap dies with its parent (the leader, which outlives the
command to record its code) and takes the whole sandbox with it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

from core.sandbox_view import HIDDEN_FILES, SYSTEM_PATHS

# "refuse": no sandbox, no round (a node that shares the bot's filesystem); "scrubbed": run with
# the scrubbed environment only (a host that holds nothing of the bot's).
BwrapMissing = Literal["refuse", "scrubbed"]

# Passed to the command when set on the node: Slurm's description of the job and its devices.
JOB_VARIABLES: Final = (
    "LANG",
    "LC_ALL",
    "USER",
    "LOGNAME",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_NTASKS",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_GPUS",
    "CUDA_VISIBLE_DEVICES",
)
# GPUs stay usable in the sandbox (bwrap's --dev /dev has none); missing ones are skipped.
DEVICES: Final = ("/dev/nvidia*", "/dev/dri", "/dev/kfd")
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# Where the sandbox links `python` to the node's `python3` (as the local sandbox does).
SHIM_DIR: Final = "/run/raven/bin"
# The bot's data directory when RAVEN_HOME is not set (bot/settings.py's default).
DEFAULT_HOME: Final = "~/.raven-bot"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})

_BODY: Final = """\
raven_confined() {
  raven_work=$1 raven_cmd=$2 raven_home=${HOME:-/} raven_pathv=${PATH:-@PATH@} raven_py=
  # `python` where the node has only `python3`, counting only what the sandbox shows.
  if command -v bwrap >/dev/null 2>&1; then
    raven_seen= raven_ifs=$IFS
    IFS=:
    for raven_dir in $raven_pathv; do
      for raven_root in @SYSTEM@; do
        case $raven_dir in "$raven_root" | "$raven_root"/*)
          raven_seen=$raven_seen${raven_seen:+:}$raven_dir ;;
        esac
      done
    done
    IFS=$raven_ifs
    if ! PATH=$raven_seen command -v python >/dev/null 2>&1; then
      raven_py=$(PATH=$raven_seen command -v python3 2>/dev/null) || raven_py=
      case $raven_py in /*) raven_pathv=$raven_pathv:@SHIM@ ;; *) raven_py= ;; esac
    fi
  fi
  set -- env -i "PATH=$raven_pathv" "HOME=$raven_home"
  for raven_name in @VARIABLES@; do
    eval "raven_set=\\${$raven_name+x} raven_value=\\${$raven_name-}"
    [ -n "$raven_set" ] && set -- "$@" "$raven_name=$raven_value"
  done
  if ! command -v bwrap >/dev/null 2>&1; then
    @MISSING@
    cd -- "$raven_work" || return 126
    "$@" sh -c "$raven_cmd"
    return
  fi
  set -- "$@" TMPDIR=/tmp bwrap --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try \\
    --die-with-parent --cap-drop ALL --proc /proc --dev /dev
  for raven_path in @SYSTEM@; do
    if [ -L "$raven_path" ]; then
      set -- "$@" --symlink "$(readlink "$raven_path")" "$raven_path"
    elif [ -d "$raven_path" ]; then
      set -- "$@" --ro-bind "$raven_path" "$raven_path"
    fi
  done
  for raven_path in @DEVICES@; do
    [ -e "$raven_path" ] && set -- "$@" --dev-bind "$raven_path" "$raven_path"
  done
  for raven_path in @FILES@; do
    [ -f "$raven_path" ] && set -- "$@" --ro-bind /dev/null "$raven_path"
  done
  [ -n "$raven_py" ] && set -- "$@" --symlink "$raven_py" @SHIM@/python
  set -- "$@" --tmpfs /tmp
  case $raven_home in /?*) set -- "$@" --tmpfs "$raven_home" ;; esac
  # Covers first, then the work dir on top (it may lie inside one), then covers inside it;
  # read-only once all is mounted (a write there fails instead of vanishing).
  for raven_path in @HIDDEN@; do
    case $raven_path in "$raven_work" | "$raven_work"/*) ;; *)
      [ -d "$raven_path" ] && set -- "$@" --tmpfs "$raven_path" ;;
    esac
  done
  for raven_path in @MOUNTS@; do
    case $raven_path in "$raven_work") ;; *)
      [ -d "$raven_path" ] && set -- "$@" --ro-bind "$raven_path" "$raven_path" ;;
    esac
  done
  set -- "$@" --bind "$raven_work" "$raven_work"
  for raven_path in @HIDDEN@; do
    case $raven_path in "$raven_work"/*)
      [ -d "$raven_path" ] && set -- "$@" --tmpfs "$raven_path" ;;
    esac
  done
  for raven_path in @HIDDEN@; do
    case $raven_path in "$raven_work") ;; *)
      [ -d "$raven_path" ] && set -- "$@" --remount-ro "$raven_path" ;;
    esac
  done
  set -- "$@" --chdir "$raven_work" --
  if env --default-signal=TERM true 2>/dev/null; then
    (trap '' TERM HUP && exec "$@" env --default-signal=TERM,HUP sh -c "$raven_cmd")
  else
    "$@" sh -c "$raven_cmd"  # an old env: a SIGTERM ends the sandbox at once
  fi
}
"""

_REFUSE: Final = (
    'echo "raven: refused: bubblewrap (bwrap) is not installed on $(uname -n), so this round '
    "cannot be sandboxed; install it there (apt-get install bubblewrap) or set "
    'RAVEN_UNSANDBOXED=1 for the bot (unsafe)" >&2; return 126'
)
_SCRUBBED: Final = ": no bubblewrap here: the scrubbed environment is the only confinement"


def confine_function(
    hidden: Sequence[str], *, without_bwrap: BwrapMissing, mounts: Sequence[str] = ()
) -> str:
    """POSIX sh defining `raven_confined WORK COMMAND` (see the module docstring).

    `hidden`: absolute directories the command must not see when they exist on the node;
    `mounts`: absolute directories it may read (bound read-only over the covers, so a mount
    inside a hidden directory stays visible), skipped where they do not exist.
    """
    absolute = [path for path in dict.fromkeys(hidden) if path.startswith("/") and path != "/"]
    readable = [path for path in dict.fromkeys(mounts) if path.startswith("/") and path != "/"]
    words = {
        "@PATH@": DEFAULT_PATH,
        "@VARIABLES@": " ".join(JOB_VARIABLES),
        "@MISSING@": _REFUSE if without_bwrap == "refuse" else _SCRUBBED,
        "@SYSTEM@": " ".join(SYSTEM_PATHS),
        "@DEVICES@": " ".join(DEVICES),
        "@FILES@": " ".join(HIDDEN_FILES),
        # An empty list still makes a valid `for` loop (over one empty word, then skipped).
        "@HIDDEN@": " ".join(shlex.quote(path) for path in absolute) or "''",
        "@MOUNTS@": " ".join(shlex.quote(path) for path in readable) or "''",
        "@SHIM@": SHIM_DIR,
    }
    body = _BODY
    for key, value in words.items():
        body = body.replace(key, value)
    return body


def bot_paths(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """What a round must never see by default: RAVEN_HOME and the bot's working directory."""
    home = Path(os.path.expanduser(environ.get("RAVEN_HOME") or DEFAULT_HOME))
    return (home.resolve(), Path.cwd().resolve())


def opted_out(environ: Mapping[str, str]) -> bool:
    """Whether the operator set RAVEN_UNSANDBOXED (run where bubblewrap is missing; unsafe)."""
    return environ.get("RAVEN_UNSANDBOXED", "").strip().lower() in _TRUE
