"""An SSH host: rounds run there as detached process groups, driven by the system `ssh` binary.

Every call is one `ssh -o BatchMode=yes` invocation running a small POSIX sh script (no agent
prompts, no password prompts: a host that needs one is unavailable, and says so). The remote
round directory (`~/raven-rounds/<id>/round-N`) holds the same `round.log` and `exit_code` as a
local round; the command runs in the machine's `workdir` on that host (or the round's `work/`).

The command runs confined (`confine.py`): `env -i` with nothing of the bot's or the login's
environment, inside bubblewrap when the host has it (its own PID namespace, `work/` the only
writable path); a host without bubblewrap runs it with the scrubbed environment only, since
the host holds nothing of the bot's. The remote scripts read the control files only when they
are regular files, never through a symlink.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from core.secret_names import SecretNames
from oncall.machines.common import (
    EXIT_NAME,
    LOG_NAME,
    MAX_LOG_CHUNK,
    WORK_NAME,
    exited,
    round_env,
    run_client,
    split_job_id,
)
from oncall.machines.confine import bot_paths, confine_function
from oncall.model import JobHandle, JobRequest, JobStatus, MachineSpec, MachineUnavailable

Clock = Callable[[], float]
# Round directories (log, exit code), relative to the remote login directory: under the home
# directory the sandbox replaces with an empty one, so the command never reaches them.
ROUNDS_DIR: Final = "raven-rounds"
_SSH_FAILED: Final = 255  # ssh's own exit code: it could not connect or authenticate
# ssh needs the agent socket to use the operator's keys; nothing else of the bot's env.
_SSH_ENV: Final = ("SSH_AUTH_SOCK",)
_EXTRA_SECONDS: Final = 30.0  # beyond connect time and grace: a remote command that hangs

# A control file the scripts may read or replace: a regular file, not a symlink, one link.
_PLAIN: Final = """\
plain() {
  [ -f "$1" ] && [ ! -L "$1" ] || return 1
  links=$(ls -ld -- "$1" 2>/dev/null) || return 1
  set -- $links
  [ "$2" = 1 ]
}
"""
# Writes $2 to the file $1 afresh (noclobber, then renamed over it): never through a link.
_RECORD: Final = """\
record() {
  rm -f -- "$1.tmp"
  (set -C && printf '%s\\n' "$2" >"$1.tmp") && rm -f -- "$1" && mv -f -- "$1.tmp" "$1"
}
"""
# The leader, remotely (after `raven_confined`): ignores SIGTERM itself (a trap, so the command
# gets the default) to outlive the command and record its code; $1 log, $2 exit file, $3 the
# work dir, $4 the command.
_LEADER_TAIL: Final = (
    _RECORD
    + """\
trap : TERM HUP
raven_confined "$3" "$4" >>"$1" 2>&1 </dev/null
record "$2" "$?"
"""
)


def leader_script(hidden: Sequence[str], mounts: Sequence[str] = ()) -> str:
    """The remote leader, with `hidden` covered by the sandbox when they exist there and
    `mounts` readable."""
    return confine_function(hidden, without_bwrap="scrubbed", mounts=mounts) + _LEADER_TAIL


# $1 round dir, $2 leader script, $3 command, $4 the workdir ("" for the round's own `work/`).
# Prints "<pid> <starttime|-> <absolute dir>".
SUBMIT_SCRIPT: Final = (
    _PLAIN
    + f"""\
set -e
command -v setsid >/dev/null 2>&1 || {{ echo "no setsid on this host (util-linux)" >&2; exit 3; }}
work=
if [ -n "$4" ]; then
  work=$(cd -- "$4" 2>/dev/null && pwd -P) || {{
    echo "the workdir $4 does not exist on this host: create it, or fix machines.toml" >&2
    exit 4; }}
fi
mkdir -p -- "$1"
cd -- "$1"
dir=$(pwd -P)
case $dir/ in "${{work:-/nowhere/}}"/*)
  echo "the workdir $4 contains the round directory $dir: pick another workdir" >&2; exit 4 ;;
esac
rm -f -- {EXIT_NAME} {EXIT_NAME}.tmp
if [ -z "$work" ]; then
  [ -d {WORK_NAME} ] && [ ! -L {WORK_NAME} ] || {{ rm -f -- {WORK_NAME}; mkdir -- {WORK_NAME}; }}
  work=$dir/{WORK_NAME}
fi
if [ -L {LOG_NAME} ] || {{ [ -e {LOG_NAME} ] && ! plain {LOG_NAME}; }}; then rm -f -- {LOG_NAME}; fi
setsid sh -c "$2" raven-round "$dir/{LOG_NAME}" "$dir/{EXIT_NAME}" "$work" "$3" \
  </dev/null >/dev/null 2>&1 &
pid=$!
start=-
if [ -r "/proc/$pid/stat" ]; then
  read -r st <"/proc/$pid/stat"
  set -- ${{st##*) }}
  shift 19
  start=$1
fi
printf '%s %s %s\\n' "$pid" "$start" "$dir"
"""
)
# Shared by poll and terminate: is $pid (started at $start, "-" if unknown) still that process?
_SAME_PROCESS: Final = """\
same() {
  kill -s 0 "$pid" 2>/dev/null || return 1
  [ "$start" = - ] && return 0
  [ -r "/proc/$pid/stat" ] || return 0
  read -r st <"/proc/$pid/stat"
  set -- ${st##*) }
  [ "$1" != Z ] && [ "${20}" = "$start" ]
}
"""
# $1 pid, $2 start, $3 exit file. Prints "exited <code>", "running" or "vanished".
POLL_SCRIPT: Final = (
    _SAME_PROCESS
    + _PLAIN
    + """\
pid=$1 start=$2 done=$3
if plain "$done"; then printf 'exited %s\\n' "$(head -c 64 -- "$done")"; exit 0; fi
if same; then echo running; exit 0; fi
if plain "$done"; then printf 'exited %s\\n' "$(head -c 64 -- "$done")"; exit 0; fi
echo vanished
"""
)
# $1 path, $2 offset, $3 max bytes.
READ_SCRIPT: Final = (
    _PLAIN
    + """\
plain "$1" || exit 0
tail -c +"$(($2 + 1))" -- "$1" | head -c "$3"
"""
)
# $1 pid, $2 start, $3 exit file, $4 grace in ticks of 0.2 s. setsid made pid the group id.
TERMINATE_SCRIPT: Final = (
    _SAME_PROCESS
    + _RECORD
    + """\
pid=$1 start=$2 done=$3 ticks=$4
same || exit 0
kill -s TERM -- "-$pid" 2>/dev/null || exit 0
n=0
while kill -s 0 -- "-$pid" 2>/dev/null && [ "$n" -lt "$ticks" ]; do
  sleep 0.2 2>/dev/null || sleep 1
  n=$((n + 1))
done
kill -s 0 -- "-$pid" 2>/dev/null || exit 0
kill -s KILL -- "-$pid" 2>/dev/null
# The leader died with the rest, before it could record the code: 128 + SIGKILL.
[ -f "$done" ] || record "$done" 137
"""
)


def ssh_command(
    spec: MachineSpec,
    script: str,
    args: Sequence[str] = (),
    *,
    ssh: str = "ssh",
    connect_timeout: float = 10,
) -> list[str]:
    """The argv that runs `script` (POSIX sh, with `args` as $1…) on the machine's host."""
    if not spec.host:
        raise MachineUnavailable(f"{spec.name}: no host configured (set `host` in machines.toml)")
    argv = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={math.ceil(connect_timeout)}"]
    for option in spec.ssh_options:
        argv += ["-o", option]
    if spec.port is not None:
        argv += ["-p", str(spec.port)]
    if spec.user is not None:
        argv += ["-l", spec.user]
    # ssh joins the remote words with spaces for the login shell: quote each one, and run
    # `sh` explicitly so the script means the same whatever that shell is.
    remote = shlex.join(["sh", "-c", script, "raven", *args])
    return [*argv, "--", spec.host, remote]


class SshMachine:
    """Runs rounds on an SSH host under its `workdir`."""

    def __init__(
        self,
        spec: MachineSpec,
        *,
        secret_names: SecretNames,
        ssh: str = "ssh",
        connect_timeout: float = 10,
        clock: Clock = time.time,
        environ: Mapping[str, str] | None = None,
        hidden: Sequence[Path] | None = None,
    ) -> None:
        """`hidden`: directories the round must not see should they exist on the host
        (default: RAVEN_HOME and the bot's working directory); `secret_names`: the settings'
        secret names, never passed to the ssh client."""
        self._spec = spec
        self._secret_names = secret_names
        self._ssh = ssh
        self._connect_timeout = connect_timeout
        self._clock = clock
        self._environ = environ
        bot_env = os.environ if environ is None else environ
        self._leader = leader_script(
            [str(p) for p in (bot_paths(bot_env) if hidden is None else hidden)], spec.mounts
        )

    @property
    def spec(self) -> MachineSpec:
        """Its registration."""
        return self._spec

    def _where(self) -> str:
        user = f"{self._spec.user}@" if self._spec.user else ""
        port = f":{self._spec.port}" if self._spec.port else ""
        return f"{self._spec.name} ({user}{self._spec.host}{port})"

    async def run(self, script: str, *args: str, extra_seconds: float = 0.0) -> bytes:
        """Run `script` remotely; its stdout. `MachineUnavailable` on any failure."""
        argv = ssh_command(
            self._spec, script, args, ssh=self._ssh, connect_timeout=self._connect_timeout
        )
        env = round_env(
            os.environ if self._environ is None else self._environ,
            secret_names=self._secret_names,
            allow=_SSH_ENV,
        )
        limit = self._connect_timeout + _EXTRA_SECONDS + extra_seconds
        returncode, out, err = await run_client(
            argv, env=env, seconds=limit, where=self._where(), silence="no answer over ssh"
        )
        said = err.decode(errors="replace").strip()[-500:]
        if returncode == _SSH_FAILED:
            raise MachineUnavailable(f"{self._where()}: ssh failed: {said or 'exit 255'}")
        if returncode != 0:
            raise MachineUnavailable(
                f"{self._where()}: the remote command failed (exit {returncode}): "
                f"{said or 'no message'}"
            )
        return out

    async def submit(self, request: JobRequest) -> JobHandle:
        """Start the round detached, its command in the campaign's workdir (else the round's
        own `work/`); `MachineUnavailable` if not."""
        directory = PurePosixPath(ROUNDS_DIR) / request.campaign_id / f"round-{request.round}"
        raw = await self.run(
            SUBMIT_SCRIPT, str(directory), self._leader, request.command, request.cwd or ""
        )
        out = raw.decode(errors="replace")
        fields = out.strip().split(" ", 2)
        if len(fields) != 3 or not fields[0].isdigit():
            raise MachineUnavailable(f"{self._where()}: unexpected answer to submit: {out!r}")
        pid, start, where = fields
        return JobHandle(
            machine=self._spec.name,
            kind="ssh",
            job_id=f"{pid}:{start}",
            host=self._spec.host or "",
            started_at=self._clock(),
            log_path=f"{where}/{LOG_NAME}",
            exit_path=f"{where}/{EXIT_NAME}",
        )

    async def poll(self, handle: JobHandle) -> JobStatus:
        """Exited (the remote exit-code file), running, or vanished."""
        pid, start = split_job_id(handle.job_id)
        raw = await self.run(POLL_SCRIPT, str(pid), start, handle.exit_path)
        answer = raw.decode(errors="replace").strip()
        word, _, rest = answer.partition(" ")
        if word == "exited":
            return exited(rest, detail=f"on {handle.host}")
        if word == "running":
            return JobStatus(state="running", detail=f"pid {pid} on {handle.host}")
        if word == "vanished":
            return JobStatus(
                state="vanished",
                detail=f"process {pid} on {handle.host} is gone without an exit code",
            )
        return JobStatus(
            state="unknown", detail=f"unexpected answer from {handle.host}: {answer!r}"
        )

    async def read_log(self, handle: JobHandle, offset: int) -> bytes:
        """Output written since byte `offset` (at most 1 MiB per call)."""
        return await self.run(READ_SCRIPT, handle.log_path, str(max(offset, 0)), str(MAX_LOG_CHUNK))

    async def terminate(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """SIGTERM to the round's process group, SIGKILL after the grace; gone is fine."""
        pid, start = split_job_id(handle.job_id)
        ticks = max(1, math.ceil(grace_seconds / 0.2))
        await self.run(
            TERMINATE_SCRIPT,
            str(pid),
            start,
            handle.exit_path,
            str(ticks),
            extra_seconds=grace_seconds + 10,
        )
