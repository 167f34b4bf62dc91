"""The command-line backend: a third-party agent CLI run as a sandboxed child process."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from agents.backends.base import AgentOutcome, AgentTask, failed, task_as_text
from agents.models.types import Message, Usage
from agents.process import describe_exit, run_process, scrub_env
from agents.registry import AgentEntry, command_allowed
from agents.sandbox import Sandbox, SandboxUnavailable
from agents.workspace_tools import denied_reason
from core.secret_names import SecretNames


class CommandLineBackend:
    """Runs `entry.command` in the workspace, in the sandbox, with a scrubbed environment,
    timeout and cap. A command-running entry (`shell`) runs the task itself as the command,
    once the requester approved it (or it is allow-listed)."""

    def __init__(
        self,
        entry: AgentEntry,
        *,
        sandbox: Sandbox,
        secret_names: SecretNames,
        environ: Mapping[str, str] | None = None,
        kill_grace: float = 2.0,
    ) -> None:
        if not entry.command:
            raise ValueError(f"cli agent `{entry.name}` has no command")
        self._entry = entry
        self._sandbox = sandbox
        self._secret_names = secret_names
        self._environ = environ
        self._kill_grace = kill_grace

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Run the command once; prompt on stdin or as the last argument."""
        entry = self._entry
        if entry.runs_commands:
            # The exact command, never wrapped in session history: it is what gets approved.
            text = task.message.strip()
            refusal = await self._refusal(task, text)
            if refusal is not None:
                return refusal
        else:
            text = task_as_text(task)
        argv = [*entry.command, text] if entry.prompt_via == "arg" else list(entry.command)
        environ = self._environ if self._environ is not None else os.environ
        # The agent's own key passes only when configured as its api_key_env.
        granted = (entry.api_key_env,) if entry.api_key_env else ()
        env = scrub_env(
            environ, secret_names=self._secret_names, allow=entry.env_allow, secrets=granted
        )
        shown = shlex.join(entry.command)
        task.workspace.mkdir(parents=True, exist_ok=True)
        try:
            result = await run_process(
                argv,
                cwd=task.workspace.resolve(),
                env=env,
                stdin_data=text.encode() if entry.prompt_via == "stdin" else None,
                timeout=entry.timeout_seconds,
                output_cap=entry.output_cap_chars,
                kill_grace=self._kill_grace,
                sandbox=self._sandbox,
                network=entry.network,
                readonly=task.readable,
            )
        except SandboxUnavailable as exc:
            return failed(task, f"The `{entry.name}` agent did not run. {exc}")
        except (FileNotFoundError, PermissionError) as exc:
            return failed(
                task,
                f"The `{entry.name}` agent could not start `{shown}`: {exc.strerror or exc}. "
                "Check it is installed and on PATH.",
            )
        error = describe_exit(
            result, what=f"The `{entry.name}` agent (`{shown}`)", timeout=entry.timeout_seconds
        )
        output = result.stdout.rstrip()
        history = [
            *task.history,
            Message.user_text(task.message),
            Message.assistant_text(output or "(no output)"),
        ]
        return AgentOutcome(
            output=output,
            transcript=[
                {
                    "type": "process",
                    "command": shown,
                    "exit_code": result.exit_code,
                    "timed_out": result.timed_out,
                    "stderr_tail": result.stderr_tail,
                }
            ],
            usage=Usage(),
            model_calls=0,
            seconds=result.seconds,
            history=history,
            truncated=result.truncated,
            error=error,
        )

    async def _refusal(self, task: AgentTask, command: str) -> AgentOutcome | None:
        """Why `command` must not run (refused, or not approved), or None to run it."""
        name = self._entry.name
        if not command:
            return failed(task, f"The `{name}` agent needs a command as its task (e.g. `ls -la`).")
        reason = denied_reason(command)
        if reason is not None:
            return failed(
                task, f"Command refused: it looks like {reason}, which is never run here."
            )
        if command_allowed(command, self._entry.allow):
            return None
        if task.approve is None:
            # Fail closed: nobody can be asked, so nothing unapproved runs.
            return failed(
                task,
                f"Command not approved: nobody can approve commands for the `{name}` agent "
                f"here. Allow it under [agents.{name}] allow in agents.toml to run it without "
                "asking.",
                not_approved=True,
            )
        if not await task.approve(command):
            return failed(
                task,
                f"Command not approved by the requester: {shlex.quote(command)}",
                not_approved=True,
            )
        return None
