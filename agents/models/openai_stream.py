"""A streamed Chat Completions reply put back together: the text, each tool call's id, name and
argument pieces, the finish reason and the usage, as the `ChatCompletion` a non-streamed call
returns, so both ways end in the same `ModelReply`.

Written here rather than with the SDK's `chat.completions.stream` helper: that helper re-dumps
the whole message on every chunk and indexes tool calls strictly, and local servers (llama.cpp,
Ollama) send chunks that are looser than OpenAI's (no `index`, usage beside the finish).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageToolCallUnion,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function


@dataclass
class _PendingCall:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


@dataclass
class ChunkAccumulator:
    """Chunks of the first choice, added as they arrive; `completion()` once they stop."""

    chunks: int = 0
    finish_reason: str | None = None
    usage: CompletionUsage | None = None
    model: str = ""
    id: str = ""
    created: int = 0
    _text: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)
    _calls: dict[int, _PendingCall] = field(default_factory=dict)

    def add(self, chunk: ChatCompletionChunk) -> None:
        """Take in one chunk."""
        self.chunks += 1
        self.id = self.id or chunk.id
        self.model = self.model or chunk.model
        self.created = self.created or chunk.created
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index:  # only the first choice is ever read
                continue
            delta = choice.delta
            if delta.content:
                self._text.append(delta.content)
            if delta.refusal:
                self._refusal.append(delta.refusal)
            for call in delta.tool_calls or ():
                self._add_call_piece(
                    getattr(call, "index", None),
                    call.id,
                    call.function.name if call.function else None,
                    call.function.arguments if call.function else None,
                )
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def _add_call_piece(
        self, index: int | None, id: str | None, name: str | None, arguments: str | None
    ) -> None:
        # A server that sends no index starts a call with its id (or name) and continues the
        # last one otherwise.
        if index is None:
            starts = bool(id or name) or not self._calls
            index = len(self._calls) if starts else max(self._calls)
        pending = self._calls.setdefault(index, _PendingCall(id="", name=""))
        pending.id = pending.id or id or ""
        pending.name = pending.name or name or ""
        if arguments:
            pending.arguments.append(arguments)

    @property
    def finished(self) -> bool:
        """Whether the server said the reply was complete (a finish reason arrived)."""
        return self.finish_reason is not None

    def completion(self) -> ChatCompletion:
        """Everything received, as the non-streamed response would have carried it."""
        calls: list[ChatCompletionMessageToolCallUnion] = [
            ChatCompletionMessageFunctionToolCall(
                id=pending.id,
                type="function",
                function=Function(name=pending.name, arguments="".join(pending.arguments)),
            )
            for _, pending in sorted(self._calls.items())
        ]
        message = ChatCompletionMessage.model_construct(
            role="assistant",
            content="".join(self._text) or None,
            refusal="".join(self._refusal) or None,
            tool_calls=calls or None,
        )
        # Constructed, not validated: a local server's finish reason may be one of its own.
        choice = Choice.model_construct(
            index=0, message=message, finish_reason=cast(Any, self.finish_reason), logprobs=None
        )
        return ChatCompletion.model_construct(
            id=self.id,
            object="chat.completion",
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=self.usage,
        )
