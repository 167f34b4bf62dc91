"""Which OAuth scopes the fake demands, and Slack's `missing_scope` reply.

Only the methods added for files and live status are checked, so tests written before scope
checks (with a narrow `scopes=` list) keep working. Slack answers a call whose token lacks
the scope with HTTP 200 `{ok:false, error:"missing_scope", needed, provided}` and the
headers `X-OAuth-Scopes` (granted) and `X-Accepted-OAuth-Scopes` (any one suffices).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ACCEPTED_SCOPES", "missing_scope"]

# method -> scopes of which any one is enough (Slack lists the first as `needed`).
ACCEPTED_SCOPES: dict[str, tuple[str, ...]] = {
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    "files.info": ("files:read",),
    # Since 2026-03 `chat:write` is accepted for channel threads, besides `assistant:write`.
    "assistant.threads.setStatus": ("assistant:write", "chat:write"),
}


def missing_scope(method: str, granted: Sequence[str]) -> tuple[dict[str, Any], str] | None:
    """Slack's error body and `X-Accepted-OAuth-Scopes` value when `granted` lacks every
    scope `method` accepts; None when the call may go on."""
    accepted = ACCEPTED_SCOPES.get(method)
    if accepted is None or any(scope in granted for scope in accepted):
        return None
    body = {
        "ok": False,
        "error": "missing_scope",
        "needed": accepted[0],
        "provided": ",".join(granted),
    }
    return body, ",".join(accepted)
