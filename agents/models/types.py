"""Provider-neutral message and reply types shared by every model provider."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["user", "assistant"]
StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "other"]
# The image formats models take in a tool result.
ImageMediaType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
IMAGE_MEDIA_TYPES: Final = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
# Caps on the images one tool result carries: every later model call of the run resends them.
MAX_RESULT_IMAGES: Final = 4
MAX_IMAGE_BASE64_CHARS: Final = 2_000_000  # about 1.5 MB of image


class TextBlock(BaseModel):
    """Plain text content."""

    model_config = ConfigDict(frozen=True)
    type: Literal["text"] = "text"
    text: str


class ToolCall(BaseModel):
    """A model's request to run one tool (Anthropic `tool_use`)."""

    model_config = ConfigDict(frozen=True)
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolImage(BaseModel):
    """An image a tool returned, for the model: base64 data and its media type."""

    model_config = ConfigDict(frozen=True)
    media_type: ImageMediaType
    data: str = Field(max_length=MAX_IMAGE_BASE64_CHARS)


class ToolResult(BaseModel):
    """The outcome of a tool call, sent back to the model (Anthropic `tool_result`)."""

    model_config = ConfigDict(frozen=True)
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    # What a person is told of this result, in plain words, when no model writes the answer
    # (the offline provider says it instead of `content`); never sent to a model.
    summary: str = ""
    # Images for the model after `content` (a tool server's screenshot); left out of a
    # stored session when there are none, so text-only results are stored as before.
    images: tuple[ToolImage, ...] = Field(
        default=(), max_length=MAX_RESULT_IMAGES, exclude_if=lambda images: not images
    )


Block = TextBlock | ToolCall | ToolResult


class Message(BaseModel):
    """One conversation message: a role and its content blocks."""

    model_config = ConfigDict(frozen=True)
    role: Role
    content: list[Block]

    @classmethod
    def user_text(cls, text: str) -> Message:
        """A user message holding one text block."""
        return cls(role="user", content=[TextBlock(text=text)])

    @classmethod
    def assistant_text(cls, text: str) -> Message:
        """An assistant message holding one text block."""
        return cls(role="assistant", content=[TextBlock(text=text)])


class ToolSpec(BaseModel):
    """A tool offered to the model: name, description and JSON schema of its input."""

    model_config = ConfigDict(frozen=True)
    name: str
    description: str
    input_schema: dict[str, Any]


class Usage(BaseModel):
    """Token accounting for one model call. `input_tokens` is the whole prompt; the cache
    fields say how much of it the provider read from or wrote to its prompt cache (priced
    apart), so `input_tokens - cache_read_tokens - cache_write_tokens` were read fresh."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def fresh_input_tokens(self) -> int:
        """The prompt tokens neither read from nor written to the cache."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        """The prompt and the answer: what a budget in tokens counts."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class ModelReply(BaseModel):
    """What a provider returns for one call."""

    content: list[TextBlock | ToolCall]
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)
    model: str = ""

    @property
    def text(self) -> str:
        """All text blocks joined."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock)).strip()

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls in this reply, in order."""
        return [b for b in self.content if isinstance(b, ToolCall)]


# Why a model call failed, as far as trying another model is concerned: the first four may
# pass on another model (a fallback chain moves on); the others say something about the
# request or the account that another model would not change.
FailureKind = Literal[
    "overloaded", "server", "timeout", "rate_limited", "request", "refused", "auth", "other"
]
TRANSIENT_FAILURES: frozenset[FailureKind] = frozenset(
    {"overloaded", "server", "timeout", "rate_limited"}
)


class ModelError(RuntimeError):
    """A model call failed for good (after retries); the message says why and what to do,
    `kind` what sort of failure it was."""

    def __init__(self, message: str, *, kind: FailureKind = "other") -> None:
        super().__init__(message)
        self.kind: FailureKind = kind

    @property
    def transient(self) -> bool:
        """Whether another model might answer where this one failed."""
        return self.kind in TRANSIENT_FAILURES
