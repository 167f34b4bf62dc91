"""The real permission gate of one task, as a node's `permit`, for the MCP tests."""

from __future__ import annotations

from agents.permissions import (
    Asker,
    Decision,
    ListAudit,
    MemoryRemembered,
    PermissionGate,
    PermissionRules,
    ToolCallRequest,
    ToolTrust,
)


class TaskGate:
    """The gate for one task in conversation `C1:t1` (requester U1), and what it decided;
    `asker` None: an unattended run (nobody to ask)."""

    def __init__(self, rules: PermissionRules, asker: Asker | None = None) -> None:
        self.audit = ListAudit()
        self.gate = PermissionGate(
            rules, asker=asker, remembered=MemoryRemembered(), audit=self.audit
        )

    async def __call__(
        self, tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
    ) -> Decision:
        call = ToolCallRequest(tool, subject, "C1:t1", "U1", "T1", detail, trust)
        return await self.gate.check(call)
