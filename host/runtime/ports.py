"""Protocols through which the core talks to the edge (channel adapters)."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from core.ids import ConversationRef
from host.runtime.messages import OutboundFile, OutboundMessage
from host.runtime.prompt_record import Prompt


class ChannelError(RuntimeError):
    """A platform refused or failed a request; `retryable` says whether trying again may help.

    Adapters raise it with `retryable=False` for answers that will not change (unknown
    channel, missing scope); anything else an adapter raises counts as retryable.
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class Channel(Protocol):
    """One chat platform's egress, as the core sees it."""

    @property
    def platform(self) -> str:
        """The platform name used in conversation keys (`slack`, `discord`, `console`)."""
        ...

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the conversation's thread; return the platform message id.

        Implementations use `message.idempotency_key` to avoid a second post when a
        redelivery after a crash races one that already went out, where the platform allows.
        """
        ...

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Replace the text of a message the bot posted earlier (status messages)."""
        ...


@runtime_checkable
class PromptSurface(Protocol):
    """How a platform shows prompts (buttons, modals, numbered choices) and their outcome."""

    async def show_prompt(self, prompt: Prompt) -> str:
        """Display a pending prompt in its conversation; return the platform message id."""
        ...

    async def close_prompt(self, prompt: Prompt) -> None:
        """Edit the prompt's message: remove buttons, show the outcome and who decided."""
        ...

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Tell one user something only they see (ephemeral where the platform allows)."""
        ...


@runtime_checkable
class ThreadStarts(Protocol):
    """Where a platform's channel takes posts that start threads of their own (a scheduled
    task's `post: channel`)."""

    def channel_level(self, conv: ConversationRef) -> ConversationRef | None:
        """The conversation of `conv`'s channel itself, where a post starts a new thread (its
        message id is the new thread's); None where there is no such channel (a DM)."""
        ...


@runtime_checkable
class ZoneDirectory(Protocol):
    """Where a platform knows people's time zones (Slack profiles)."""

    async def time_zone(self, user_id: str) -> str | None:
        """The person's IANA time zone, None when the platform cannot say."""
        ...


@runtime_checkable
class PeopleDirectory(Protocol):
    """How one platform names a person to other people: a display name, never a mention
    (a mention pings). Each channel implements it; the core renders names through it."""

    async def display_name(self, user_id: str) -> str:
        """The person's display name as the platform has it (untrusted: the core cleans it);
        the id itself when the platform cannot say."""
        ...


@runtime_checkable
class WorkingStatus(Protocol):
    """Where a platform shows that the bot is working in a conversation (Slack's thread
    status, Discord's typing indicator). The core calls it one conversation at a time, in
    order; a failure is the platform's to log, never the turn's."""

    async def show(self, conv: ConversationRef, text: str) -> None:
        """Show (or replace) the working line of `conv`, kept alive until `clear`."""
        ...

    async def clear(self, conv: ConversationRef) -> None:
        """Nothing works in `conv` any more: remove the working line."""
        ...


# Why a platform refuses a file for good: the token lacks the permission, the file is bigger
# than the platform takes, or it is no longer a regular file reached without links.
FileRefusal = Literal["missing_scope", "too_large", "unreadable"]


class FileRefused(ChannelError):
    """A file the platform (or the safety check) will not take however often it is tried;
    `why` says so to people in plain words ("this workspace hasn't given me …")."""

    def __init__(self, message: str, *, reason: FileRefusal, why: str) -> None:
        super().__init__(message, retryable=False)
        self.reason: FileRefusal = reason
        self.why = why


@runtime_checkable
class FileSink(Protocol):
    """Where a platform takes files into a conversation's thread (Slack uploads, Discord
    attachments, the console's printed paths)."""

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """Share `file` in the thread; return the platform's id for it. On `redelivery` first
        look for the same file (name and size) already shared by the bot, and return its id
        instead: found only when the thread shows more than `earlier_copies` of it (the
        copies other deliveries put there)."""
        ...
