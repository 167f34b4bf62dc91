"""An in-memory PromptSurface that records what it was asked to show, close and whisper."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

from core.ids import ConversationRef
from host.runtime.prompt_record import Prompt


class RecordingPromptSurface:
    """Implements the `PromptSurface` protocol by appending to lists."""

    def __init__(
        self,
        *,
        fail_show: bool = False,
        fail_close: bool = False,
        on_show: Callable[[Prompt], Awaitable[None]] | None = None,
    ) -> None:
        self.shown: list[Prompt] = []
        self.closed: list[Prompt] = []
        self.private: list[tuple[ConversationRef, str, str]] = []
        self.fail_show = fail_show
        self.fail_close = fail_close
        self.on_show = on_show
        self._prompt_ids = itertools.count(1)

    async def show_prompt(self, prompt: Prompt) -> str:
        if self.on_show is not None:
            await self.on_show(prompt)
        if self.fail_show:
            raise ConnectionError("platform unavailable")
        self.shown.append(prompt)
        return f"pm{next(self._prompt_ids)}"

    async def close_prompt(self, prompt: Prompt) -> None:
        if self.fail_close:
            raise ConnectionError("platform unavailable")
        self.closed.append(prompt)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        self.private.append((conv, user_id, text))
