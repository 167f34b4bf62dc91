"""The command-line backend: a third-party agent CLI run as a sandboxed child process."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from agents.backends.base import AgentOutcome, AgentTask, failed, task_as_text
from agents.models.types import Message, Usage
from agents.process import describe_exit, run_process, scrub_env
from agents.registry import AgentEntry


class CommandLineBackend:
    """Runs `entry.command` in the workspace with a scrubbed environment, timeout and cap."""

    def __init__(
        self,
        entry: AgentEntry,
        *,
        environ: Mapping[str, str] | None = None,
        kill_grace: float = 2.0,
    ) -> None:
        if not entry.command:
            raise ValueError(f"cli agent `{entry.name}` has no command")
        self._entry = entry
        self._environ = environ
        self._kill_grace = kill_grace

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Run the command once; prompt on stdin or as the last argument."""
        entry = self._entry
        text = task_as_text(task)
        argv = [*entry.command, text] if entry.prompt_via == "arg" else list(entry.command)
        environ = self._environ if self._environ is not None else os.environ
        # The agent's own key passes only when configured as its api_key_env.
        granted = (entry.api_key_env,) if entry.api_key_env else ()
        env = scrub_env(environ, allow=entry.env_allow, secrets=granted)
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
            )
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
