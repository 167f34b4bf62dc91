"""The API backend: an agent on a remote model API (Anthropic- or OpenAI-compatible)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from agents.backends.base import (
    AgentOutcome,
    AgentTask,
    BackendUnavailable,
    cap_output,
    failed,
    message_text,
)
from agents.backends.inproc import InProcessBackend
from agents.models.types import Message, Usage
from agents.registry import AgentEntry
from agents.specialists import Specialist

if TYPE_CHECKING:
    from agents.models.anthropic_provider import AnthropicProvider

OPENAI_DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
DEFAULT_KEY_ENV: Final = MappingProxyType(
    {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
)
# One model call should not take the whole task allowance (the provider retries within
# it): each is bounded by RAVEN_MODEL_TIMEOUT, as every model call is. This is its default.
DEFAULT_CALL_TIMEOUT_SECONDS: Final = 120.0
ERROR_BODY_CHARS: Final = 300


class ApiBackend:
    """Anthropic style: the agent loop over its own provider. OpenAI style: one chat call."""

    def __init__(
        self,
        entry: AgentEntry,
        specialist: Specialist,
        *,
        environ: Mapping[str, str] | None = None,
        max_iterations: int = 40,
        max_tokens: int = 4096,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS,
    ) -> None:
        if not entry.model:
            raise BackendUnavailable(f"api agent `{entry.name}` has no model configured")
        env = environ if environ is not None else os.environ
        self._entry = entry
        self._specialist = specialist
        self._max_tokens = max_tokens
        self._key = self._read_key(entry, env)
        self._provider: AnthropicProvider | None = None
        self._inner: InProcessBackend | None = None
        if entry.api_style == "anthropic":
            # Imported here: the SDK takes seconds to import, and only a configured
            # Anthropic-style agent needs it (bot.app stays quick to load offline).
            from agents.models.anthropic_provider import AnthropicProvider

            self._provider = AnthropicProvider(
                api_key=self._key or "",
                model=entry.model,
                base_url=entry.base_url,
                timeout=min(call_timeout, entry.timeout_seconds),
            )
            self._inner = InProcessBackend(
                self._provider,
                specialist,
                max_iterations=max_iterations,
                max_tokens=max_tokens,
            )

    @staticmethod
    def _read_key(entry: AgentEntry, env: Mapping[str, str]) -> str | None:
        """The API key, read once at build time; a keyless OpenAI-style server is allowed."""
        name = entry.api_key_env or DEFAULT_KEY_ENV[entry.api_style]
        key = env.get(name, "")
        if key:
            return key
        if entry.api_style == "openai" and entry.api_key_env is None:
            return None  # local servers often need no key; an explicit api_key_env must be set
        raise BackendUnavailable(
            f"api agent `{entry.name}` needs an API key: set the {name} environment variable"
        )

    async def aclose(self) -> None:
        """Close the provider's connection pool, if any."""
        if self._provider is not None:
            await self._provider.aclose()

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Run the task on the remote model."""
        if self._inner is not None:
            return await self._inner.run(task)
        return await self._chat(task)

    async def _chat(self, task: AgentTask) -> AgentOutcome:
        entry = self._entry
        base_url = (entry.base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")
        url = f"{base_url}/chat/completions"
        payload = {
            "model": entry.model,
            "max_tokens": self._max_tokens,
            "messages": [
                {"role": "system", "content": self._system_prompt()},
                *(
                    {"role": m.role, "content": message_text(m)}
                    for m in task.history
                    if message_text(m)
                ),
                {"role": "user", "content": task.message},
            ],
        }
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=entry.timeout_seconds)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json=payload, headers=headers) as response,
            ):
                status = response.status
                body = await response.text()
        except TimeoutError:
            return failed(
                task,
                f"The `{entry.name}` agent got no reply from {base_url} within "
                f"{entry.timeout_seconds:g} s.",
                seconds=time.monotonic() - started,
            )
        except aiohttp.ClientError as exc:
            return failed(
                task,
                self._redact(f"The `{entry.name}` agent could not reach {base_url}: {exc}"),
                seconds=time.monotonic() - started,
            )
        seconds = time.monotonic() - started
        if status != 200:
            detail = _error_detail(body)
            return failed(
                task,
                self._redact(
                    f"The `{entry.name}` agent's API ({url}) answered HTTP {status}: {detail}"
                ),
                seconds=seconds,
            )
        try:
            text, usage = _parse_chat(body)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return failed(
                task,
                f"The `{entry.name}` agent's API ({url}) sent a reply that is not an "
                f"OpenAI-style chat completion ({type(exc).__name__}).",
                seconds=seconds,
            )
        output, truncated = cap_output(text, entry.output_cap_chars)
        return AgentOutcome(
            output=output,
            transcript=[{"type": "answer", "text": output}],
            usage=usage,
            model_calls=1,
            seconds=seconds,
            history=[
                *task.history,
                Message.user_text(task.message),
                Message.assistant_text(text or "(empty answer)"),
            ],
            truncated=truncated,
        )

    def _system_prompt(self) -> str:
        entry = self._entry
        return (
            f"You are the `{entry.name}` agent: {entry.description}\n"
            "You have no tools here: you cannot read files, run code or browse. Answer from the "
            "task text and your knowledge, and say plainly what you could not check."
        )

    def _redact(self, text: str) -> str:
        # Error bodies from odd servers may echo the request; the key must never surface.
        if self._key and len(self._key) >= 8:
            text = text.replace(self._key, "[redacted]")
        return text


def _parse_chat(body: str) -> tuple[str, Usage]:
    data: Any = json.loads(body)
    content = data["choices"][0]["message"]["content"]
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:  # content parts
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raw_usage = data.get("usage") or {}
    usage = Usage(
        input_tokens=int(raw_usage.get("prompt_tokens") or 0),
        output_tokens=int(raw_usage.get("completion_tokens") or 0),
    )
    return text.strip(), usage


def _error_detail(body: str) -> str:
    try:
        data: Any = json.loads(body)
        message = data["error"]["message"] if isinstance(data.get("error"), dict) else data["error"]
        return str(message)[:ERROR_BODY_CHARS]
    except (ValueError, KeyError, TypeError, AttributeError):
        return body[:ERROR_BODY_CHARS] or "(empty body)"
