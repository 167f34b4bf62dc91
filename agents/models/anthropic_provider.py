"""The Anthropic Messages API provider: the SDK retries, we give plain-spoken errors. Replies
are used whole; `stream=True` receives them as events (the SDK's `messages.stream` helper puts
them together), so a long answer keeps the connection busy and only silence times out."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, contextmanager
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import anthropic
from anthropic.types import (
    AssistantMessageParam,
    Base64ImageSourceParam,
    ContentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)
from anthropic.types import Message as SDKMessage
from anthropic.types import TextBlock as SDKTextBlock
from anthropic.types import ToolUseBlock as SDKToolUseBlock

from agents.models.failures import attempts, deadline_guard, status_kind
from agents.models.types import (
    FailureKind,
    Message,
    ModelError,
    ModelReply,
    StopReason,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)

# Roughly 1024 tokens, the smallest prefix the API will cache; shorter prompts gain nothing.
CACHE_MIN_CHARS: Final = 4000

_STOP_REASONS: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    # The reply was cut off either way; callers treat it like max_tokens.
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
}

# The events the API itself sends in a stream (the SDK's helper adds derived ones).
_WIRE_EVENTS: Final = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
# An error event mid-stream, by its type: what kind of failure it is.
_STREAM_ERROR_KINDS: Final[dict[str, FailureKind]] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
}

_STATUS_HINTS: Final[dict[int, str]] = {
    400: "The API rejected the request as invalid; the message above says which part.",
    401: "Check ANTHROPIC_API_KEY: it is missing, mistyped, or revoked.",
    402: "Check the Anthropic account's billing and credit balance.",
    403: "The API key may not do this; check its workspace and permissions.",
    413: "The request is too large; shorten the conversation or tool results.",
    429: "Rate limited: wait a minute and try again, or lower concurrency / raise the limits.",
    529: "Anthropic is overloaded right now; try again in a few minutes.",
}


class AnthropicProvider:
    """A `ModelProvider` on `anthropic.AsyncAnthropic`; the SDK retries transient failures."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        max_wait_seconds: float = 60.0,
        stream: bool = False,
    ) -> None:
        if not api_key:
            raise ValueError("Anthropic API key is empty; set ANTHROPIC_API_KEY.")
        self._api_key = api_key
        self._model = model
        self._timeout = timeout
        self._stream = stream
        # The SDK waits as long as a retry-after header says (hours, if asked): a turn gives
        # up once its attempts and waits together exceed this budget.
        self._deadline = timeout * (max(0, max_retries) + 1) + max_wait_seconds
        # The SDK retries 408/409/429/5xx, timeouts and connection errors with capped
        # exponential backoff, and obeys the API's retry-after(-ms) and x-should-retry headers.
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max(0, max_retries)
        )

    @property
    def name(self) -> str:
        """`anthropic:<model>`."""
        return f"anthropic:{self._model}"

    @property
    def offline(self) -> bool:
        """Always False: this is a real model."""
        return False

    @property
    def base_url(self) -> str:
        """The API base URL in use, without any credentials it may embed."""
        return _safe_url(str(self._client.base_url))

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool."""
        await self._client.close()

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Run one Messages API call, which the SDK retries if need be; `ModelError` if it fails."""
        sdk_messages = to_sdk_messages(messages)
        sdk_tools = [to_sdk_tool(t) for t in tools]
        sdk_system = to_sdk_system(system)
        with self._failures_as_model_error():
            if self._stream:
                response = await self._streamed(sdk_system, sdk_messages, sdk_tools, max_tokens)
            else:
                async with self._deadline_guard():
                    response = await self._client.messages.create(
                        model=self._model,
                        max_tokens=max_tokens,
                        system=sdk_system,
                        messages=sdk_messages,
                        tools=sdk_tools or anthropic.omit,
                        timeout=self._timeout,
                    )
        return to_reply(response)

    async def _streamed(
        self,
        system: str | list[TextBlockParam] | anthropic.Omit,
        messages: list[MessageParam],
        tools: list[ToolParam],
        max_tokens: int,
    ) -> SDKMessage:
        """The call with its reply streamed and put together by the SDK. The deadline covers
        opening the stream (the SDK's attempts and waits); after that the reply takes as long
        as it takes, so long as events keep coming within the per-call timeout."""
        opening = self._client.messages.stream(
            model=self._model,
            max_tokens=max_tokens,
            system=system,
            messages=messages,
            tools=tools or anthropic.omit,
            timeout=self._timeout,
        )
        events = 0
        async with AsyncExitStack() as closing:
            async with self._deadline_guard():
                stream = await closing.enter_async_context(opening)
            try:
                async for event in stream:
                    events += event.type in _WIRE_EVENTS
                    if event.type == "message_stop":
                        return await stream.get_final_message()
            except anthropic.APITimeoutError:
                raise self._stream_error(
                    events,
                    f"then nothing for {self._timeout:g}s. If the model is simply slow, raise "
                    "RAVEN_MODEL_TIMEOUT",
                    "timeout",
                ) from None
            except anthropic.APIConnectionError as exc:
                cause = exc.__cause__
                reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
                raise self._stream_error(
                    events, f"then the connection broke ({reason}). Try again", "server"
                ) from exc
            except anthropic.APIStatusError as exc:  # an error event in the stream
                kind = _STREAM_ERROR_KINDS.get(exc.type or "", "server")
                detail = exc.api_message or _body_text(exc.body)
                raise self._stream_error(
                    events, f"then the API reported {exc.type or 'an error'}: {detail}", kind
                ) from exc
            except ValueError as exc:  # a tool input that is not JSON
                raise self._stream_error(
                    events, f"then one that could not be read ({exc})", "server"
                ) from exc
        raise self._stream_error(
            events, "then the stream ended before the reply was finished. Try again", "server"
        )

    def _stream_error(self, events: int, what: str, kind: FailureKind) -> ModelError:
        return ModelError(
            self._redact(
                f"Anthropic API reply from {self.base_url} was cut off mid-way: "
                f"{events} event{'' if events == 1 else 's'} arrived, {what}."
            ),
            kind=kind,
        )

    def _deadline_guard(self) -> AbstractAsyncContextManager[None]:
        return deadline_guard(self._deadline, "Anthropic API")

    async def check(self) -> str:
        """Health check for `doctor`: key, reachability and model name; `ModelError` if not."""
        with self._failures_as_model_error():
            # Retrieving the model (aliases resolve) proves all three with no tokens spent.
            info = await self._client.models.retrieve(self._model, timeout=self._timeout)
        return (
            f"{self.name} reachable at {self.base_url}: key accepted, "
            f"model {info.display_name} ({info.id}) available"
        )

    @contextmanager
    def _failures_as_model_error(self) -> Iterator[None]:
        """Turn the SDK's final failure, after its retries, into one plain-spoken ModelError."""
        try:
            yield
        except anthropic.AnthropicError as exc:
            raise ModelError(
                self._redact(self._failure_message(exc)), kind=failure_kind(exc)
            ) from exc

    def _failure_message(self, exc: anthropic.AnthropicError) -> str:
        if isinstance(exc, anthropic.APIStatusError):
            return self._status_message(exc)
        if isinstance(exc, anthropic.APITimeoutError):  # before its base, APIConnectionError
            return self._timeout_message(exc)
        if isinstance(exc, anthropic.APIConnectionError):
            return self._connection_message(exc)
        if isinstance(exc, anthropic.APIResponseValidationError):
            return (
                f"The Anthropic API at {self.base_url} sent a reply that is not a valid "
                f"API response (HTTP {exc.status_code}). "
                "Check ANTHROPIC_BASE_URL points at the Anthropic API."
            )
        return f"Anthropic SDK error: {type(exc).__name__}: {exc}"

    def _status_message(self, exc: anthropic.APIStatusError) -> str:
        status = exc.status_code
        detail = exc.api_message or _body_text(exc.body) or exc.response.reason_phrase
        kind = f" {exc.type}" if exc.type else ""
        request_id = f", request-id {exc.request_id}" if exc.request_id else ""
        if status in _STATUS_HINTS:
            hint = _STATUS_HINTS[status]
        elif status >= 500:
            hint = "Anthropic had a server error; try again shortly."
        elif status != 404:
            hint = "See the API's message above."
        else:
            hint = f"Check the model name ({self._model!r}, RAVEN_MODEL) and ANTHROPIC_BASE_URL."
        return (
            f"Anthropic API call failed with HTTP {status}{kind}: {detail} "
            f"({attempts(exc.request.headers)}{request_id}). {hint}"
        )

    def _timeout_message(self, exc: anthropic.APITimeoutError) -> str:
        return (
            f"Anthropic API call timed out: no reply from {self.base_url} within "
            f"{self._timeout:g}s ({attempts(exc.request.headers)}). Try again later; if "
            "replies are simply slow, raise RAVEN_MODEL_TIMEOUT."
        )

    def _connection_message(self, exc: anthropic.APIConnectionError) -> str:
        cause = exc.__cause__
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return (
            f"Could not connect to the Anthropic API at {self.base_url} ({reason}; "
            f"{attempts(exc.request.headers)}). Check ANTHROPIC_BASE_URL and the network or "
            "proxy settings."
        )

    def _redact(self, text: str) -> str:
        # Belt and braces: an echoing proxy or odd error body must never leak the key.
        if len(self._api_key) >= 8:
            text = text.replace(self._api_key, "[redacted]")
        return text


def to_sdk_system(system: str) -> str | list[TextBlockParam] | anthropic.Omit:
    """The system prompt as the SDK wants it, marked for prompt caching when long."""
    if not system:
        return anthropic.omit
    if len(system) > CACHE_MIN_CHARS:
        return [TextBlockParam(type="text", text=system, cache_control={"type": "ephemeral"})]
    return system


def to_sdk_messages(messages: Sequence[Message]) -> list[MessageParam]:
    """Our messages as SDK params; tool results lead their user message, as the API requires."""
    out: list[MessageParam] = []
    for message in messages:
        results: list[ContentBlockParam] = []
        others: list[ContentBlockParam] = []
        for block in message.content:
            if isinstance(block, ToolResult):
                if message.role != "user":
                    raise ModelError("A tool_result block must be in a user message.")
                results.append(
                    ToolResultBlockParam(
                        type="tool_result",
                        tool_use_id=block.tool_use_id,
                        content=_result_content(block),
                        is_error=block.is_error,
                    )
                )
            elif isinstance(block, ToolCall):
                if message.role != "assistant":
                    raise ModelError("A tool_use block must be in an assistant message.")
                others.append(
                    ToolUseBlockParam(
                        type="tool_use", id=block.id, name=block.name, input=dict(block.input)
                    )
                )
            elif block.text:  # the API rejects empty text blocks
                others.append(TextBlockParam(type="text", text=block.text))
        content = [*results, *others]
        if message.role == "user":
            out.append(UserMessageParam(role="user", content=content))
        else:
            out.append(AssistantMessageParam(role="assistant", content=content))
    return out


def _result_content(result: ToolResult) -> str | list[TextBlockParam | ImageBlockParam]:
    """A tool result's content: its text alone, or its text then its images as blocks."""
    if not result.images:
        return result.content
    blocks: list[TextBlockParam | ImageBlockParam] = []
    if result.content:  # the API rejects empty text blocks
        blocks.append(TextBlockParam(type="text", text=result.content))
    blocks.extend(
        ImageBlockParam(
            type="image",
            source=Base64ImageSourceParam(
                type="base64", media_type=image.media_type, data=image.data
            ),
        )
        for image in result.images
    )
    return blocks


def to_sdk_tool(spec: ToolSpec) -> ToolParam:
    """One tool spec as an SDK tool param."""
    return ToolParam(
        name=spec.name, description=spec.description, input_schema=dict(spec.input_schema)
    )


def to_reply(response: SDKMessage) -> ModelReply:
    """An SDK response as our `ModelReply`; block kinds we do not use are dropped."""
    content: list[TextBlock | ToolCall] = []
    for block in response.content:
        if isinstance(block, SDKTextBlock):
            content.append(TextBlock(text=block.text))
        elif isinstance(block, SDKToolUseBlock):
            content.append(ToolCall(id=block.id, name=block.name, input=dict(block.input)))
    usage = response.usage
    # Cached tokens are reported apart from input_tokens; count them so totals stay honest
    # (and keep them apart too: the cache is priced apart).
    cache_write = usage.cache_creation_input_tokens or 0
    cache_read = usage.cache_read_input_tokens or 0
    return ModelReply(
        content=content,
        stop_reason=_STOP_REASONS.get(response.stop_reason or "", "other"),
        usage=Usage(
            input_tokens=usage.input_tokens + cache_write + cache_read,
            output_tokens=usage.output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        ),
        model=response.model,
    )


def _body_text(body: object) -> str:
    if body is None:
        return ""
    text = str(body)
    return text if len(text) <= 300 else text[:300] + "…"


def _safe_url(url: str) -> str:
    # A base URL may carry user:password@ or a ?key=; neither belongs in an error message.
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literals keep their brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def failure_kind(exc: anthropic.AnthropicError) -> FailureKind:
    """The failure's class (see `FailureKind`): overload (529), server errors, timeouts and
    rate limits may pass on another model; a bad request, a refusal or a key may not."""
    if isinstance(exc, anthropic.APIStatusError):
        return "overloaded" if exc.type == "overloaded_error" else status_kind(exc.status_code)
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout"
    if isinstance(exc, anthropic.APIConnectionError):
        return "server"
    return "other"
