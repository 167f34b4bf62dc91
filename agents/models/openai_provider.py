"""The OpenAI-compatible Chat Completions provider (OpenAI, vLLM, Ollama, llama.cpp, LM Studio,
OpenRouter): the SDK retries, we give plain-spoken errors. Replies are used whole; `stream=True`
receives them as chunks, so a slow local server's long answer keeps the connection busy and only
a server that goes quiet for the per-call timeout fails."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Final
from urllib.parse import urlsplit

import openai
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)

from agents.models.failures import attempts, deadline_guard, status_kind
from agents.models.openai_stream import ChunkAccumulator
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
from core.url_secrets import mask_url, url_credentials

_STOP_REASONS: Final[dict[str, StopReason]] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

# The SDK numbers each attempt it sends in this request header (0 for the first).

# OpenAI's own newer models refuse `max_tokens`; many compatible servers know only it.
_OPENAI_HOST: Final = "api.openai.com"

_STATUS_HINTS: Final[dict[int, str]] = {
    400: "The server rejected the request as invalid; the message above says which part.",
    401: "Check OPENAI_API_KEY: it is missing, mistyped, or revoked.",
    402: "Check the account's billing and credit balance.",
    403: "The API key may not do this; check its project and permissions.",
    413: "The request is too large; shorten the conversation or tool results.",
    429: "Rate limited: wait a minute and try again, or lower concurrency / raise the limits.",
}


class OpenAIProvider:
    """A `ModelProvider` on `openai.AsyncOpenAI` Chat Completions; the SDK retries transient
    failures (408/409/429/5xx, timeouts, connection errors) and obeys retry-after."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        max_wait_seconds: float = 60.0,
        images: bool = True,
        stream: bool = False,
    ) -> None:
        if not api_key:
            raise ValueError("OpenAI API key is empty; set OPENAI_API_KEY.")
        self._api_key = api_key
        self._model = model
        self._timeout = timeout
        # False for a text-only model: a tool result's images become a note instead.
        self._images = images
        self._stream = stream
        self._deadline = timeout * (max(0, max_retries) + 1) + max_wait_seconds
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max(0, max_retries)
        )
        self._secrets = [s for s in (api_key, *url_credentials(base_url)) if len(s) >= 8]

    @property
    def name(self) -> str:
        """`openai:<model>`."""
        return f"openai:{self._model}"

    @property
    def offline(self) -> bool:
        """Always False: this is a real model."""
        return False

    @property
    def base_url(self) -> str:
        """The API base URL in use, with any credentials it embeds masked."""
        return mask_url(str(self._client.base_url)).rstrip("/")

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
        """Run one Chat Completions call, which the SDK retries if need be; `ModelError` if
        it fails."""
        sdk_messages = to_sdk_messages(system, messages, images=self._images)
        sdk_tools = [to_sdk_tool(t) for t in tools]
        openai_limit = self._is_openai
        with self._failures_as_model_error():
            if self._stream:
                response = await self._streamed(sdk_messages, sdk_tools, max_tokens, openai_limit)
            else:
                async with self._deadline_guard():
                    response = await self._client.chat.completions.create(
                        model=self._model,
                        messages=sdk_messages,
                        tools=sdk_tools or openai.omit,
                        max_tokens=openai.omit if openai_limit else max_tokens,
                        max_completion_tokens=max_tokens if openai_limit else openai.omit,
                        timeout=self._timeout,
                    )
        return self._reply(response)

    async def _streamed(
        self,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionFunctionToolParam],
        max_tokens: int,
        openai_limit: bool,
    ) -> ChatCompletion:
        """The call with its reply streamed and put back together. The deadline covers opening
        the stream (the SDK's attempts and waits); after that the reply takes as long as it
        takes, so long as chunks keep coming within the per-call timeout."""
        async with self._deadline_guard():
            stream = await self._client.chat.completions.create(
                model=self._model,
                messages=messages,
                tools=tools or openai.omit,
                max_tokens=openai.omit if openai_limit else max_tokens,
                max_completion_tokens=max_tokens if openai_limit else openai.omit,
                stream=True,
                stream_options={"include_usage": True},  # usage comes in a last chunk
                timeout=self._timeout,
            )
        received = ChunkAccumulator()
        async with stream:
            try:
                async for chunk in stream:
                    received.add(chunk)
            except openai.APITimeoutError:
                raise self._stream_error(
                    received,
                    f"then nothing for {self._timeout:g}s. If the model is simply slow, raise "
                    "RAVEN_MODEL_TIMEOUT",
                    "timeout",
                ) from None
            except openai.APIConnectionError as exc:
                cause = exc.__cause__
                reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
                raise self._stream_error(
                    received, f"then the connection broke ({reason}). Try again", "server"
                ) from exc
            except openai.APIError as exc:
                if isinstance(exc, openai.APIStatusError):
                    raise
                raise self._stream_error(
                    received, f"then the server reported an error: {exc.message}", "server"
                ) from exc
        if not received.finished:
            raise self._stream_error(
                received, "then the stream ended before the reply was finished. Try again", "server"
            )
        return received.completion()

    def _stream_error(self, received: ChunkAccumulator, what: str, kind: FailureKind) -> ModelError:
        return ModelError(
            self._redact(
                f"OpenAI-compatible API reply from {self.base_url} was cut off mid-way: "
                f"{received.chunks} chunk{'' if received.chunks == 1 else 's'} arrived, {what}."
            ),
            kind=kind,
        )

    def _deadline_guard(self) -> AbstractAsyncContextManager[None]:
        return deadline_guard(self._deadline, "OpenAI-compatible API")

    async def check(self) -> str:
        """Health check for `doctor`: key, reachability and model; `ModelError` if not."""
        try:
            with self._failures_as_model_error():
                page = await self._client.models.list(timeout=self._timeout)
            served = [m.id for m in page.data]
        except ModelError as exc:
            if exc.kind != "request":  # a key, an outage: the call below would fail alike
                raise
            served = []  # some proxies serve no model list: the call below decides
        if self._model in served:
            return f"{self.name} reachable at {self.base_url}: key accepted, model available"
        with self._failures_as_model_error():
            # A local server may answer to any model name: one token proves it does.
            await self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": "user", "content": "ping"}],
                max_tokens=openai.omit if self._is_openai else 1,
                max_completion_tokens=1 if self._is_openai else openai.omit,
                timeout=self._timeout,
            )
        listed = ", ".join(served[:5]) or "none"
        return f"{self.name} reachable at {self.base_url}: answered (models listed: {listed})"

    @property
    def _is_openai(self) -> bool:
        return urlsplit(str(self._client.base_url)).hostname == _OPENAI_HOST

    def _reply(self, response: ChatCompletion) -> ModelReply:
        if not response.choices:
            raise ModelError(
                f"The OpenAI-compatible API at {self.base_url} sent a reply with no choices.",
                kind="server",
            )
        return to_reply(response)

    @contextmanager
    def _failures_as_model_error(self) -> Iterator[None]:
        """Turn the SDK's final failure, after its retries, into one plain-spoken ModelError."""
        try:
            yield
        except openai.OpenAIError as exc:
            raise ModelError(
                self._redact(self._failure_message(exc)), kind=failure_kind(exc)
            ) from exc

    def _failure_message(self, exc: openai.OpenAIError) -> str:
        if isinstance(exc, openai.APIStatusError):
            return self._status_message(exc)
        if isinstance(exc, openai.APITimeoutError):  # before its base, APIConnectionError
            return (
                f"OpenAI-compatible API call timed out: no reply from {self.base_url} within "
                f"{self._timeout:g}s ({attempts(exc.request.headers)}). Try again later; if "
                "replies are simply slow (a local model), raise RAVEN_MODEL_TIMEOUT."
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
            return (
                f"Could not connect to the OpenAI-compatible API at {self.base_url} ({reason}; "
                f"{attempts(exc.request.headers)}). Check the URL in RAVEN_MODEL or "
                "OPENAI_BASE_URL, that the server is running, and the network or proxy settings."
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return (
                f"The server at {self.base_url} sent a reply that is not a valid Chat "
                f"Completions response (HTTP {exc.status_code}). Check the base URL ends in "
                "the API's root (often /v1)."
            )
        return f"OpenAI SDK error: {type(exc).__name__}: {exc}"

    def _status_message(self, exc: openai.APIStatusError) -> str:
        status = exc.status_code
        detail = _error_detail(exc) or exc.response.reason_phrase
        request_id = f", request-id {exc.request_id}" if exc.request_id else ""
        if status in _STATUS_HINTS:
            hint = _STATUS_HINTS[status]
        elif status >= 500:
            hint = f"The server at {self.base_url} had an error; try again shortly."
        elif status == 404:
            hint = f"Check the model name ({self._model!r}, RAVEN_MODEL) and the base URL."
        else:
            hint = "See the server's message above."
        return (
            f"OpenAI-compatible API call to {self.base_url} failed with HTTP {status}: "
            f"{detail} ({attempts(exc.request.headers)}{request_id}). {hint}"
        )

    def _redact(self, text: str) -> str:
        # Belt and braces: an echoing proxy or odd error body must never leak the key.
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


def to_sdk_messages(
    system: str, messages: Sequence[Message], *, images: bool = True
) -> list[ChatCompletionMessageParam]:
    """Our conversation as Chat Completions messages: the system prompt first; each tool
    result a `tool` message right after the assistant's calls; a result's images (which
    `tool` messages cannot hold) in a user message after them, or a note when `images` is off."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append(ChatCompletionSystemMessageParam(role="system", content=system))
    for message in messages:
        if message.role == "assistant":
            out.append(_assistant_message(message))
        else:
            out.extend(_user_messages(message, images=images))
    return out


def _user_messages(message: Message, *, images: bool) -> list[ChatCompletionMessageParam]:
    """One user message: its tool results first (they must follow the calls), then any
    images they carried, then its text."""
    out: list[ChatCompletionMessageParam] = []
    pictures: list[ChatCompletionContentPartParam] = []
    texts: list[str] = []
    for block in message.content:
        if isinstance(block, ToolResult):
            out.append(_tool_message(block, images=images))
            if images and block.images:
                pictures.append({"type": "text", "text": f"Images from {block.tool_use_id}:"})
                pictures.extend(
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:{i.media_type};base64,{i.data}"},
                    }
                    for i in block.images
                )
        elif isinstance(block, ToolCall):
            raise ModelError("A tool_use block must be in an assistant message.")
        elif block.text:
            texts.append(block.text)
    if pictures:
        out.append(ChatCompletionUserMessageParam(role="user", content=pictures))
    if texts:
        out.append(ChatCompletionUserMessageParam(role="user", content="\n\n".join(texts)))
    return out


def _assistant_message(message: Message) -> ChatCompletionAssistantMessageParam:
    text = "\n\n".join(b.text for b in message.content if isinstance(b, TextBlock) and b.text)
    calls = [
        ChatCompletionMessageFunctionToolCallParam(
            id=b.id, type="function", function={"name": b.name, "arguments": json.dumps(b.input)}
        )
        for b in message.content
        if isinstance(b, ToolCall)
    ]
    if any(isinstance(b, ToolResult) for b in message.content):
        raise ModelError("A tool_result block must be in a user message.")
    param = ChatCompletionAssistantMessageParam(role="assistant", content=text or None)
    if calls:
        param["tool_calls"] = calls
    return param


def _tool_message(result: ToolResult, *, images: bool) -> ChatCompletionToolMessageParam:
    # Chat Completions has no is_error: the model reads it from the text instead.
    content = f"Error: {result.content}" if result.is_error else result.content
    if result.images and not images:
        n = len(result.images)
        content += f"\n[{n} image{'' if n == 1 else 's'} left out: this model takes no images]"
    return ChatCompletionToolMessageParam(
        role="tool", tool_call_id=result.tool_use_id, content=content
    )


def to_sdk_tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    """One tool spec as a Chat Completions function tool."""
    return ChatCompletionFunctionToolParam(
        type="function",
        function={
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.input_schema),
        },
    )


def to_reply(response: ChatCompletion) -> ModelReply:
    """The first choice as our `ModelReply`; a refusal is its text, custom tool calls dropped."""
    choice = response.choices[0]
    message = choice.message
    content: list[TextBlock | ToolCall] = []
    text = message.content or message.refusal or ""
    if text:
        content.append(TextBlock(text=text))
    for n, call in enumerate(message.tool_calls or ()):
        if isinstance(call, ChatCompletionMessageFunctionToolCall):
            content.append(
                ToolCall(
                    # Some local servers send no id; the tool result must still name one.
                    id=call.id or f"call_{n}",
                    name=call.function.name,
                    input=_arguments(call.function.arguments),
                )
            )
    stop = _STOP_REASONS.get(choice.finish_reason or "", "other")
    if message.refusal and not message.content:
        stop = "refusal"
    elif stop == "end_turn" and any(isinstance(b, ToolCall) for b in content):
        stop = "tool_use"  # some servers end a tool call with "stop"
    usage = response.usage
    return ModelReply(
        content=content,
        stop_reason=stop,
        usage=Usage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            # Part of prompt_tokens, priced apart (OpenAI's automatic prompt cache).
            cache_read_tokens=_cached_tokens(usage),
        ),
        model=response.model,
    )


def _cached_tokens(usage: CompletionUsage | None) -> int:
    """How many prompt tokens the server read from its cache (0 when it does not say)."""
    details = usage.prompt_tokens_details if usage is not None else None
    return (details.cached_tokens or 0) if details is not None else 0


def _arguments(raw: str) -> dict[str, object]:
    """A call's JSON arguments; anything but a JSON object is passed on whole as `arguments`,
    so the tool's schema check answers the model with a repairable error."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        if isinstance(message, str) and message:
            return message[:300]
    text = "" if body is None else str(body)
    return text if len(text) <= 300 else text[:300] + "…"


def failure_kind(exc: openai.OpenAIError) -> FailureKind:
    """The failure's class (see `FailureKind`): overload, server errors, timeouts and rate
    limits may pass on another model; a bad request or a key may not."""
    if isinstance(exc, openai.APIStatusError):
        return status_kind(exc.status_code)
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "server"
    return "other"
