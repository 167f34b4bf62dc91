"""What both SDK-backed providers say about a failed call: its class for a fallback chain,
and how many attempts the SDK made (both SDKs are generated alike and mark each retry)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final

from agents.models.types import FailureKind, ModelError

# The header both SDKs put on each request: how many retries came before it.
RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"


def status_kind(status: int) -> FailureKind:
    """The class of an HTTP error answer: 529 overloaded, 429 rate limited, 401/403 a key
    problem, 5xx the server's, any other 4xx the request's."""
    if status == 529:
        return "overloaded"
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    if status >= 500:
        return "server"
    return "request"


def attempts(request_headers: Mapping[str, str]) -> str:
    """`after N attempts`, read from the failed request (the SDK's last attempt)."""
    retries = request_headers.get(RETRY_COUNT_HEADER, "")
    if not retries.isdigit():
        return "number of attempts unknown"
    n = int(retries) + 1
    return f"after {n} attempt{'' if n == 1 else 's'}"


@asynccontextmanager
async def deadline_guard(deadline: float, api: str) -> AsyncIterator[None]:
    """Bound the SDK's attempts and the waits between them by the call's deadline; past it,
    a `timeout` ModelError saying so (`api`: "Anthropic API", "OpenAI-compatible API")."""
    try:
        async with asyncio.timeout(deadline):
            yield
    except TimeoutError:
        raise ModelError(
            f"{api} call gave up after {deadline:g}s: the server kept asking to wait (rate "
            "limited or overloaded) or did not answer. Try again later.",
            kind="timeout",
        ) from None
