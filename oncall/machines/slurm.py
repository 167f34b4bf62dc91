"""A Slurm cluster: rounds are batch jobs (`sbatch`), watched with `squeue`/`scontrol show job`,
cancelled with `scancel`; logs and exit codes are read from the round directory, which must be
on a filesystem the compute nodes share with the bot.

With accounting off (`sacct` knows nothing), Slurm forgets a job some minutes after it ends;
the job's own `exit_code` file (written by the batch script) is what tells its end after that.

The batch script runs the command confined (`confine.py`): a scrubbed environment, bubblewrap
with its own PID namespace, RAVEN_HOME and the bot's working directory covered, the campaign's
working directory (else the round's `work/`) the only writable path, the machine's `mounts`
read-only. The round directory (log, exit code) is under RAVEN_HOME/campaigns/, which must be
on a filesystem the compute nodes share. A node without bubblewrap shares the bot's filesystem,
so its rounds are refused unless the bot runs with RAVEN_UNSANDBOXED=1. sbatch itself gets only the
base variables and SLURM_CONF, so nothing else of the bot's environment reaches the job.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from core.secret_names import SecretNames
from oncall.machines.common import (
    EXIT_NAME,
    EXIT_TMP_NAME,
    LOG_NAME,
    command_dir,
    exited,
    minutes,
    prepare_round_dir,
    read_chunk,
    read_exit_file,
    round_dir,
    round_env,
    run_client,
    work_dir,
)
from oncall.machines.confine import BwrapMissing, bot_paths, confine_function, opted_out
from oncall.model import JobHandle, JobRequest, JobStatus, MachineSpec, MachineUnavailable

Clock = Callable[[], float]
SCRIPT_NAME: Final = "round.sbatch"
# Slurm's client commands find their cluster through SLURM_CONF; nothing else of the bot's env
# reaches them, and so (sbatch exports its environment into the job) nothing else the job.
_SLURM_ENV: Final = ("SLURM_CONF",)
_COMMAND_SECONDS: Final = 60.0
_POLL_INTERVAL_SECONDS: Final = 0.2
# Job states in which its processes may still run (squeue's %T, scontrol's JobState).
ACTIVE_STATES: Final = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "RESV_DEL_HOLD",
        "STAGE_OUT",
        "SPECIAL_EXIT",
    }
)
_UNKNOWN_JOB: Final = "Invalid job id"


def batch_script(
    command: str,
    directory: Path,
    *,
    cwd: Path | None = None,
    mounts: Sequence[str] = (),
    hidden: Sequence[str] = (),
    without_bwrap: BwrapMissing = "refuse",
) -> str:
    """The batch script: the command confined to `cwd` (default `directory`/work) with
    `mounts` read-only, then its exit code written atomically to `directory`/exit_code (out
    of the command's reach)."""
    done = shlex.quote(str(directory / EXIT_NAME))
    tmp = shlex.quote(str(directory / EXIT_TMP_NAME))
    work = shlex.quote(str(cwd or work_dir(directory)))
    # The trap (not an ignore, so the command keeps the default) lets the script outlive a
    # scancel's SIGTERM long enough to record the command's code. The code is written to a
    # file created afresh (noclobber) and renamed over the old one, never through a link.
    return (
        "#!/bin/sh\n"
        "trap : TERM\n"
        + confine_function(hidden, without_bwrap=without_bwrap, mounts=mounts)
        + f"raven_confined {work} {shlex.quote(command)}\n"
        "code=$?\n"
        f"rm -f -- {tmp}\n"
        f"(set -C && printf '%s\\n' \"$code\" >{tmp}) && rm -f -- {done} && mv -f -- {tmp} {done}\n"
        'exit "$code"\n'
    )


def sbatch_argv(
    spec: MachineSpec, request: JobRequest, directory: Path, cwd: Path | None = None
) -> list[str]:
    """The sbatch command for one round in `directory` (its script is written there), the
    command running in `cwd` (default `directory`/work)."""
    argv = [
        "sbatch",
        "--parsable",
        "--job-name",
        f"raven-{request.campaign_id}-{request.round}",
        "--chdir",
        str(cwd or work_dir(directory)),
        "--output",
        str(directory / LOG_NAME),
        "--open-mode=append",
    ]
    partition = request.partition or spec.partition
    if partition:
        argv += ["--partition", partition]
    if request.time_limit_seconds is not None:
        argv += ["--time", str(minutes(request.time_limit_seconds))]
    if request.cpus is not None:
        argv += ["--cpus-per-task", str(request.cpus)]
    return [*argv, str(directory / SCRIPT_NAME)]


def exit_code_of(field: str) -> int | None:
    """scontrol's `ExitCode=code:signal` as a shell-style code (128 + signal when killed)."""
    code, _, sig = field.partition(":")
    try:
        return 128 + int(sig) if sig and int(sig) else int(code)
    except ValueError:
        return None


def job_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` output as a dict (values up to the next space)."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


class SlurmMachine:
    """Runs rounds as Slurm batch jobs on a cluster whose filesystem the bot shares."""

    def __init__(
        self,
        spec: MachineSpec,
        *,
        secret_names: SecretNames,
        clock: Clock = time.time,
        environ: Mapping[str, str] | None = None,
        hidden: Sequence[Path] | None = None,
        unsandboxed: bool | None = None,
    ) -> None:
        """`hidden`: directories the round must not see (default: RAVEN_HOME and the bot's
        working directory); `unsandboxed`: run on a node without bubblewrap anyway (default:
        RAVEN_UNSANDBOXED in `environ`); `secret_names`: the settings' secret names, never
        passed to the Slurm clients or a job."""
        self._spec = spec
        self._secret_names = secret_names
        self._clock = clock
        self._environ = environ
        bot_env = os.environ if environ is None else environ
        self._hidden = tuple(str(p) for p in (bot_paths(bot_env) if hidden is None else hidden))
        if unsandboxed is None:
            unsandboxed = opted_out(bot_env)
        self._without_bwrap: BwrapMissing = "scrubbed" if unsandboxed else "refuse"

    @property
    def spec(self) -> MachineSpec:
        """Its registration."""
        return self._spec

    async def _run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        """Run one Slurm client command: (exit code, stdout, stderr); unavailable if it hangs."""
        env = round_env(
            os.environ if self._environ is None else self._environ,
            secret_names=self._secret_names,
            allow=_SLURM_ENV,
        )
        code, out, err = await run_client(
            argv,
            env=env,
            seconds=_COMMAND_SECONDS,
            where=self._spec.name,
            silence=f"{argv[0]} got no answer from the Slurm controller",
        )
        return code, out.decode(errors="replace"), err.decode(errors="replace").strip()[-800:]

    async def submit(self, request: JobRequest) -> JobHandle:
        """Submit the round with sbatch; `MachineUnavailable` with sbatch's words if refused."""
        directory = await asyncio.to_thread(
            prepare_round_dir, Path(round_dir(self._spec, request)), work=request.cwd is None
        )
        exit_path = directory / EXIT_NAME
        cwd = await asyncio.to_thread(command_dir, self._spec, request, directory)
        script = batch_script(
            request.command,
            directory,
            cwd=cwd,
            mounts=self._spec.mounts,
            hidden=self._hidden,
            without_bwrap=self._without_bwrap,
        )
        await asyncio.to_thread(_write_script, directory, script)
        code, out, err = await self._run(sbatch_argv(self._spec, request, directory, cwd))
        job_id = out.strip().split(";", 1)[0]
        if code != 0 or not job_id.isdigit():
            raise MachineUnavailable(
                f"{self._spec.name}: sbatch refused the round (exit {code}): "
                f"{err or out.strip() or 'no message'}"
            )
        return JobHandle(
            machine=self._spec.name,
            kind="slurm",
            job_id=job_id,
            host=socket.gethostname(),  # where it was submitted from
            started_at=self._clock(),
            log_path=str(directory / LOG_NAME),
            exit_path=str(exit_path),
        )

    async def poll(self, handle: JobHandle) -> JobStatus:
        """The exit-code file if written; else what Slurm says; forgotten and no file: vanished."""
        text = await asyncio.to_thread(read_exit_file, Path(handle.exit_path))
        if text is not None:
            return exited(text, detail=f"Slurm job {handle.job_id}")
        state = await self._queue_state(handle.job_id)
        if state in ACTIVE_STATES:
            return JobStatus(state="running", detail=f"Slurm job {handle.job_id}: {state}")
        return await self._ended(handle)

    async def _queue_state(self, job_id: str) -> str | None:
        """squeue's state for the job; None once it is no longer queued or running."""
        code, out, err = await self._run(["squeue", "-h", "-j", job_id, "-o", "%T"])
        if code == 0:
            return out.strip() or None
        if _UNKNOWN_JOB in err:
            return None
        raise MachineUnavailable(f"{self._spec.name}: squeue failed (exit {code}): {err}")

    async def _ended(self, handle: JobHandle) -> JobStatus:
        """A job squeue no longer lists: scontrol's verdict, then the exit file, else vanished."""
        code, out, err = await self._run(["scontrol", "show", "job", "-o", handle.job_id])
        if code != 0 and _UNKNOWN_JOB not in err:
            raise MachineUnavailable(f"{self._spec.name}: scontrol failed (exit {code}): {err}")
        fields = job_fields(out) if code == 0 else {}
        state = fields.get("JobState", "")
        if state in ACTIVE_STATES:
            return JobStatus(state="running", detail=f"Slurm job {handle.job_id}: {state}")
        # The batch script may have just written its file; it knows the command's own code.
        text = await asyncio.to_thread(read_exit_file, Path(handle.exit_path))
        if text is not None:
            return exited(text, detail=f"Slurm job {handle.job_id}")
        if state:
            reason = fields.get("Reason", "")
            return JobStatus(
                state="exited",
                exit_code=exit_code_of(fields.get("ExitCode", "")),
                detail=f"Slurm job {handle.job_id}: {state}" + (f" ({reason})" if reason else ""),
            )
        return JobStatus(
            state="vanished",
            detail=f"Slurm job {handle.job_id} is unknown to Slurm and left no exit code",
        )

    async def read_log(self, handle: JobHandle, offset: int) -> bytes:
        """Output written since byte `offset` (at most 1 MiB per call), from the output file."""
        return await asyncio.to_thread(read_chunk, Path(handle.log_path), offset)

    async def terminate(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """scancel (Slurm's SIGTERM), then `scancel --signal=KILL` after the grace if needed.

        Slurm itself SIGKILLs a cancelled job's leftovers after the cluster's KillWait (30 s by
        default) and may refuse further signals for it meanwhile; an ended job is fine.
        """
        if await self._queue_state(handle.job_id) not in ACTIVE_STATES:
            return
        await self._scancel([handle.job_id])
        if await self._until_ended(handle.job_id, grace_seconds):
            return
        # --full: the batch script and its children too (by default only the job's steps).
        await self._scancel(["--signal=KILL", "--full", handle.job_id])

    async def _scancel(self, args: list[str]) -> None:
        code, _, err = await self._run(["scancel", *args])
        if code != 0 and _UNKNOWN_JOB not in err:
            raise MachineUnavailable(f"{self._spec.name}: scancel failed (exit {code}): {err}")

    async def _until_ended(self, job_id: str, within: float) -> bool:
        """Whether the job left squeue's active states within `within` seconds."""
        deadline = time.monotonic() + within
        while await self._queue_state(job_id) in ACTIVE_STATES:
            if time.monotonic() >= deadline:
                return False
            # Slurm has no "wait for this job" call without accounting: poll squeue.
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        return True


def _write_script(directory: Path, script: str) -> None:
    """The batch script, written afresh (whatever was at its name is replaced, not followed)."""
    path = directory / SCRIPT_NAME
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o700), "w", encoding="utf-8") as out:
        out.write(script)
