"""Third-party coding agents over the Agent Client Protocol (the official `acp` SDK's client
side): one sandboxed process per agent and conversation, its sessions continued by stateful
nodes, its permission requests answered through the permission gate.

Nothing here is imported at start-up but `processes` (which imports the SDK, half a second
of pydantic models, only when the first ACP agent starts)."""
