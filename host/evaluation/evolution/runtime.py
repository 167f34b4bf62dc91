"""Where an agent's harness meets the running bot: the built-in harness of a specialist
(what evolution starts from when no version is active), and the backend an active version
runs with (its prompt and runtime values, and its knowledge notes before each task)."""

from __future__ import annotations

import dataclasses

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask
from agents.sandbox import Sandbox
from agents.specialists import Specialist, default_specialists
from agents.workspace_tools import ShellPolicy
from core.secret_names import SecretNames
from core.store import Store
from host.evaluation.evolution.harness import Harness, render


def specialist_for(role: str, sandbox: Sandbox, *, secret_names: SecretNames) -> Specialist:
    """The built-in specialist of `role` (RuntimeError naming the known roles); its commands
    run in `sandbox`, without the variables `secret_names` (the settings') calls secret."""
    shell = ShellPolicy(sandbox=sandbox, secret_names=secret_names)
    specialists = default_specialists(shell=shell)
    specialist = specialists.get(role)
    if specialist is None:
        raise RuntimeError(f"no specialist role {role!r} (known: {', '.join(specialists)})")
    return specialist


def builtin_harness(specialist: Specialist, max_iterations: int, max_tokens: int) -> Harness:
    """h0 of a specialist as shipped: its prompt and the configured caps."""
    return Harness(
        prompt=specialist.system_prompt,
        runtime={"max_iterations": max_iterations, "max_tokens": max_tokens},
    )


def harnessed(specialist: Specialist, harness: Harness, base: Harness) -> Specialist:
    """The specialist with the harness's system prompt (and config block)."""
    return dataclasses.replace(specialist, system_prompt=render(harness, base, "").system)


class HarnessedBackend:
    """Adds the active harness's knowledge notes to each task (the rest is in the inner
    backend's specialist and caps)."""

    def __init__(self, inner: AgentBackend, harness: Harness, base: Harness) -> None:
        self._inner = inner
        self._harness = harness
        self._base = base

    async def run(self, task: AgentTask) -> AgentOutcome:
        """The inner backend's run with the task's notes before its text."""
        if task.continuation is not None:
            return await self._inner.run(task)
        message = render(self._harness, self._base, task.prompt).message
        return await self._inner.run(dataclasses.replace(task, prompt=message))


class ActiveHarnesses:
    """Each agent's promoted harness, read once the database is open (a promotion takes
    effect at the next start)."""

    def __init__(self) -> None:
        self._active: dict[str, Harness] = {}

    async def load(self, store: Store) -> None:
        """Read the active versions."""
        from host.evaluation.evolution.versions import HarnessVersions

        self._active = await HarnessVersions(store).active()

    def get(self, agent: str) -> Harness | None:
        """The agent's active harness; None: its built-in one."""
        return self._active.get(agent)
