"""Standing checks run in the conversation's sandboxed workspace, as the `shell` agent's
commands run: confined by the sandbox, with a scrubbed environment (nothing of the bot's),
a time limit, and the whole process group killed when it ends."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agents.process import run_process, scrub_env
from agents.sandbox import Sandbox, SandboxUnavailable
from core.ids import ConversationRef
from host.features.schedules.tasks import CheckResult

CHECK_TIMEOUT_SECONDS = 60.0
_OUTPUT_CAP = 16_000


class SandboxChecks:
    """The `CheckRunner` of the serving bot."""

    def __init__(
        self,
        sandbox: Sandbox,
        workspace: Callable[[ConversationRef], Path],
        *,
        timeout: float = CHECK_TIMEOUT_SECONDS,
    ) -> None:
        self._sandbox = sandbox
        self._workspace = workspace
        self._timeout = timeout

    async def run(self, conv: ConversationRef, command: str) -> CheckResult:
        workspace = self._workspace(conv)
        workspace.mkdir(parents=True, exist_ok=True)
        try:
            result = await run_process(
                ["sh", "-c", command],
                cwd=workspace.resolve(),
                env=scrub_env(os.environ),
                sandbox=self._sandbox,
                timeout=self._timeout,
                output_cap=_OUTPUT_CAP,
                merge_stderr=True,
            )
        except (SandboxUnavailable, OSError) as exc:
            return CheckResult(None, "", error=str(exc) or type(exc).__name__)
        return CheckResult(result.exit_code, result.stdout, result.timed_out)
