"""Third-party coding agents over the Agent Client Protocol (the official `acp` SDK's client
side): one sandboxed process per agent and conversation, its sessions continued by stateful
nodes, its permission requests answered through the permission gate."""

from agents.backends.acp.backend import AcpBackend
from agents.backends.acp.processes import AcpProcesses

__all__ = ["AcpBackend", "AcpProcesses"]
