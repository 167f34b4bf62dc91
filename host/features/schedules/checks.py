"""Where standing checks run.

Without `machine:`, in the conversation's sandboxed workspace, as the `shell` agent's
commands run: confined by the sandbox, with a scrubbed environment (nothing of the bot's),
a time limit, and the whole process group killed when it ends.

With `machine: NAME`, on that machine of machines.toml through the campaign machinery (a
detached round, polled, its log read, terminated at the time limit), confined as campaign
rounds are, and only for an owner the machine admits (`users`/`roles`, admins): checked when
the check is proposed and again at each firing, since machines.toml may change.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from agents.process import run_process, scrub_env
from agents.sandbox import Sandbox, SandboxUnavailable
from core.ids import ConversationRef
from core.secret_names import SecretNames
from host.features.schedules.store import ScheduledTask
from host.features.schedules.work import Check
from host.runtime.roles import Roles
from oncall.access import Requester, machine_refusal
from oncall.model import JobRequest, Machine
from oncall.probe import OUTPUT_CAP, ProbeResult, probe

CHECK_TIMEOUT_SECONDS = 60.0
# A remote check may wait for a Slurm slot or an ssh connection before it starts.
MACHINE_CHECK_TIMEOUT_SECONDS = 300.0


class Checks:
    """The `CheckRunner` of the serving bot."""

    def __init__(
        self,
        sandbox: Sandbox,
        workspace: Callable[[ConversationRef], Path],
        *,
        machines: Mapping[str, Machine],
        roles: Roles,
        rounds: Path,
        secret_names: SecretNames,
        timeout: float = CHECK_TIMEOUT_SECONDS,
        machine_timeout: float = MACHINE_CHECK_TIMEOUT_SECONDS,
    ) -> None:
        """`secret_names`: the settings' secret names, never passed to a workspace check."""
        self._sandbox = sandbox
        self._secret_names = secret_names
        self._workspace = workspace
        self._machines = machines
        self._roles = roles
        # Where each remote check's round directory goes (RAVEN_HOME/campaigns).
        self._rounds = rounds
        self._timeout = timeout
        self._machine_timeout = machine_timeout

    def refusal(self, check: Check, owner: str, roles: tuple[str, ...]) -> str | None:
        """Why `owner` may not run `check` where it says (None: they may)."""
        if check.machine is None:
            return None
        machine = self._machines.get(check.machine)
        if machine is None:
            known = ", ".join(f"`{name}`" for name in sorted(self._machines)) or "none"
            return (
                f"`{check.machine}` is not a machine of machines.toml (known: {known}); "
                "leave `machine:` out to run the check in this conversation's workspace."
            )
        who = Requester(owner, roles, admin=owner in self._roles.admins)
        return machine_refusal(machine.spec, who)

    async def run(self, task: ScheduledTask, check: Check, roles: tuple[str, ...]) -> ProbeResult:
        # The owner's roles as the platform reports them now (the firing's admission).
        refusal = self.refusal(check, task.owner, roles)
        if refusal is not None:
            return ProbeResult(None, "", error=refusal)
        if check.machine is None:
            return await self._in_workspace(task.conversation, check.command)
        machine = self._machines[check.machine]
        stamp = f"{time.time_ns():x}"
        workdir = machine.spec.workdir
        if workdir is None and machine.spec.kind != "ssh":
            workdir = str(self._workspace_of(task.conversation))
        request = JobRequest(
            campaign_id=f"check_{task.id}_{stamp}",
            round=1,
            command=check.command,
            workdir=self._rounds / f"check_{task.id}" / stamp,
            cwd=workdir,
            time_limit_seconds=self._machine_timeout,
        )
        return await probe(machine, request, time_limit=self._machine_timeout)

    def _workspace_of(self, conv: ConversationRef) -> Path:
        workspace = self._workspace(conv)
        workspace.mkdir(parents=True, exist_ok=True)
        return workspace.resolve()

    async def _in_workspace(self, conv: ConversationRef, command: str) -> ProbeResult:
        try:
            result = await run_process(
                ["sh", "-c", command],
                cwd=self._workspace_of(conv),
                env=scrub_env(os.environ, secret_names=self._secret_names),
                sandbox=self._sandbox,
                timeout=self._timeout,
                output_cap=OUTPUT_CAP,
                merge_stderr=True,
            )
        except (SandboxUnavailable, OSError) as exc:
            return ProbeResult(None, "", error=str(exc) or type(exc).__name__)
        return ProbeResult(result.exit_code, result.stdout, result.timed_out)
