"""Agent execution backends (in-process loop, command line, model API) and their factory."""

from __future__ import annotations

from collections.abc import Mapping

from agents.backends.acp.processes import AcpProcesses
from agents.backends.api import DEFAULT_CALL_TIMEOUT_SECONDS, ApiBackend
from agents.backends.base import (
    AgentBackend,
    AgentOutcome,
    AgentTask,
    BackendUnavailable,
)
from agents.backends.cli import CommandLineBackend
from agents.backends.inproc import InProcessBackend
from agents.models.provider import ModelProvider
from agents.registry import AgentEntry
from agents.sandbox import Sandbox
from agents.specialists import Specialist
from core.secret_names import SecretNames

__all__ = [
    "AcpProcesses",
    "AgentBackend",
    "AgentOutcome",
    "AgentTask",
    "ApiBackend",
    "BackendUnavailable",
    "CommandLineBackend",
    "InProcessBackend",
    "build_backend",
]


def build_backend(
    entry: AgentEntry,
    *,
    provider: ModelProvider,
    specialists: Mapping[str, Specialist],
    sandbox: Sandbox,
    secret_names: SecretNames,
    environ: Mapping[str, str] | None = None,
    max_iterations: int = 40,
    max_tokens: int = 4096,
    acp: AcpProcesses | None = None,
    call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS,
) -> AgentBackend:
    """The backend that runs `entry`; `BackendUnavailable` (with the reason) if it cannot.
    `secret_names`: what a command-line agent's environment never gets (an ACP agent's pool
    has its own); `call_timeout`: each model call of an api agent (RAVEN_MODEL_TIMEOUT)."""
    if not entry.enabled:
        why = entry.disabled_reason or "disabled in config"
        raise BackendUnavailable(f"agent `{entry.name}` is disabled: {why}")
    if entry.backend == "feature":
        raise BackendUnavailable(
            f"agent `{entry.name}` is run by a capability that is not installed here"
        )
    if entry.backend == "cli":
        return CommandLineBackend(
            entry, sandbox=sandbox, secret_names=secret_names, environ=environ
        )
    if entry.backend == "acp":
        if acp is None:
            raise BackendUnavailable(f"agent `{entry.name}`: no ACP process pool was given")
        from agents.backends.acp.backend import AcpBackend  # the SDK: only when used

        return AcpBackend(entry, acp)
    specialist = specialists.get(entry.role)
    if specialist is None:
        known = ", ".join(sorted(specialists)) or "none"
        raise BackendUnavailable(
            f"agent `{entry.name}` uses role `{entry.role}`, which has no specialist "
            f"(known: {known})"
        )
    if entry.backend == "inproc":
        return InProcessBackend(
            provider, specialist, max_iterations=max_iterations, max_tokens=max_tokens
        )
    return ApiBackend(
        entry,
        specialist,
        environ=environ,
        max_iterations=max_iterations,
        max_tokens=max_tokens,
        call_timeout=call_timeout,
    )
