"""Typed replies as answers: which pending prompt of the conversation a message answers."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from core.ids import ConversationRef
from host.prompts.decisions import AnswerOutcome, Decider
from host.prompts.prompt_store import PromptStore
from host.prompts.responders import Responders
from host.prompts.wording import answered_text, match_option, which_one
from host.runtime.prompt_record import Prompt

# The start of a prompt's id, as a typed answer may name it.
_ID_START = re.compile(r"[\w-]{6,64}")


class TypedAnswers:
    """Matches a typed message to the one prompt it answers, or says which ones it fits."""

    def __init__(
        self,
        records: PromptStore,
        responders: Responders,
        decider: Decider,
        clock: Callable[[], float],
    ) -> None:
        self._records = records
        self._responders = responders
        self._decider = decider
        self._clock = clock

    async def answer(
        self,
        conversation: ConversationRef,
        responder_id: str,
        text: str,
        *,
        waiting_only: bool = False,
    ) -> AnswerOutcome | None:
        """Treat a typed reply as an answer to a prompt of the conversation, if it fits one.

        `1 abc12345` or `abc12345 1` (the start of a prompt's id) answers that prompt. Else
        the text answers the one pending prompt it fits that the typer may answer; when it
        fits several, the outcome (`ambiguous`) lists them instead of guessing. An accepted
        outcome's message names the prompt answered. None means the text answers nothing,
        so the caller handles it as a normal turn.

        `waiting_only` (someone who did not address the bot): only a live prompt waiting for
        the typer (a stored responder; an admin must mention the bot) is considered; anything
        else is chatter and gets None.
        """
        pending = await self._records.pending(conversation, newest_first=True)
        if waiting_only:
            pending = [
                p
                for p in pending
                if responder_id in p.allowed_responders and self._clock() < p.expires_at
            ]
            if not pending:
                return None
        addressed = await self._addressed(conversation, pending, text, decided=not waiting_only)
        if addressed is not None:
            prompt, rest = addressed
            return _named(await self._decider.answer(prompt, responder_id, rest), pending)
        may_answer = self._responders.may_answer
        now = self._clock()
        fits = [
            p
            for p in pending
            # Any text fits a free-text prompt, so only its live responders' messages count;
            # a bystander chatting in the thread must still get a normal turn.
            if (
                bool(text.strip()) and may_answer(p, responder_id) and now < p.expires_at
                if p.kind == "free_text"
                else match_option(p.options, text) is not None
            )
        ]
        mine = [p for p in fits if may_answer(p, responder_id)]
        live = [p for p in mine if now < p.expires_at]
        if len(live) > 1:
            return AnswerOutcome("ambiguous", which_one(live[::-1], text, pending))
        # One live prompt; else the newest expired one of theirs (to say it expired), else
        # someone else's (to say who may answer it).
        target = next(iter(live or mine or fits), None)
        if target is None:
            return None
        return _named(await self._decider.answer(target, responder_id, text), pending)

    async def _addressed(
        self, conversation: ConversationRef, pending: Sequence[Prompt], text: str, *, decided: bool
    ) -> tuple[Prompt, str] | None:
        """The prompt a typed answer names by the start of its id (first or last word; only
        first for free text), with the rest of the text as the answer; `decided`: a decided
        prompt too (the answer then hears that it was decided)."""
        words = text.split()
        if len(words) < 2:
            return None
        stripped = text.strip()
        forms = (
            (words[0], stripped[len(words[0]) :].strip(), True),
            (words[-1], stripped[: -len(words[-1])].strip(), False),
        )
        for token, rest, id_first in forms:
            start = token.strip("`#").casefold()
            if not _ID_START.fullmatch(start):
                continue
            named = [p for p in pending if p.id.casefold().startswith(start)]
            if not named and decided:
                # A decided prompt, so the answer hears that it was decided.
                named = await self._records.decided_with_id_start(conversation, start)
            if len(named) == 1 and (id_first or named[0].kind != "free_text"):
                return named[0], rest
        return None


def _named(outcome: AnswerOutcome, pending: Sequence[Prompt]) -> AnswerOutcome:
    """A typed answer's outcome whose confirmation says which prompt it answered."""
    prompt = outcome.prompt
    if outcome.status != "accepted" or prompt is None:
        return outcome
    return replace(outcome, message=answered_text(prompt, pending))
