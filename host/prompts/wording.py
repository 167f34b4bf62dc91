"""What people read about prompts: short ids, gists, option matching and outcome texts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from host.runtime.prompt_record import Prompt

MAX_ANSWER_CHARS = 4000
# Outcome texts quote answers; free-text answers can be long, so quotes are shortened.
_QUOTE_CHARS = 200
# Prompts are listed by the start of their id, this long unless more is needed to tell
# them apart; a typed answer may name one by any start this long or longer.
SHORT_ID_CHARS = 8
# Echoed in the "which one?" reply only when it is this plain.
_PLAIN_ANSWER = re.compile(r"[\w .,'-]{1,24}")
# For `help`: how a typed message answers a question (see `TypedAnswers`).
TYPED_ANSWER_HELP = (
    "type the option's number or its text (`1`, `approve`), or your answer to a free-text "
    "question. When several questions wait for you I list them: add the prompt's id, as "
    "in `1 abc12345` or `abc12345 1`."
)


def match_option(options: Sequence[str], text: str) -> str | None:
    """The option a reply names: its text (case-insensitive) or its 1-based number."""
    wanted = text.strip().rstrip(".!").strip().casefold()
    if not wanted:
        return None
    for option in options:
        if option.casefold() == wanted:
            return option
    if wanted.isdecimal() and 1 <= int(wanted) <= len(options):
        return options[int(wanted) - 1]
    return None


def normalise(prompt: Prompt, raw: str) -> tuple[str | None, str]:
    """The canonical answer, or None with the reason it is not acceptable."""
    if prompt.kind == "free_text":
        text = raw.strip()
        if not text:
            return None, "Please type an answer."
        if len(text) > MAX_ANSWER_CHARS:
            return None, f"Answers are limited to {MAX_ANSWER_CHARS} characters."
        return text, ""
    option = match_option(prompt.options, raw)
    if option is None:
        listed = ", ".join(f"{n}. {o}" for n, o in enumerate(prompt.options, start=1))
        return None, f"Please answer with one of: {listed}."
    return option, ""


def short_ids(prompts: Iterable[Prompt]) -> dict[str, str]:
    """Each prompt's id shortened as far as it stays distinct among `prompts`."""
    ids = list(dict.fromkeys(p.id for p in prompts))
    length = SHORT_ID_CHARS
    while len({i[:length] for i in ids}) < len(ids):
        length += 1
    return {i: i[:length] for i in ids}


def gist(question: str, limit: int = 80) -> str:
    """The first line of a question that is not a code fence, shortened."""
    lines = [ln.strip() for ln in question.splitlines()]
    first = next((ln for ln in lines if ln and not ln.startswith("```")), "")
    first = first.rstrip(":").strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def answered_text(prompt: Prompt, pending: Sequence[Prompt]) -> str:
    """The confirmation of a typed answer: which prompt it answered, and with what."""
    short = short_ids([*pending, prompt])[prompt.id]
    return (
        f"✔ Answered prompt `{short}` ({gist(prompt.question)}) with {quote(prompt.answer or '')}."
    )


def which_one(prompts: Sequence[Prompt], text: str, pending: Sequence[Prompt]) -> str:
    """The reply to a typed answer that fits several prompts (oldest first): which, and how
    to pick one."""
    shorts = short_ids([*pending])
    typed = text.strip()
    plain = bool(_PLAIN_ANSWER.fullmatch(typed))
    answer = typed if plain else "ANSWER"
    example = shorts[prompts[0].id]
    said = f"“{typed}”" if plain else "Your answer"
    lines = [
        f"{said} fits {len(prompts)} questions waiting for you here, so I answered none. "
        f"Add the prompt's id to pick one, as in `{answer} {example}` or "
        f"`{example} {answer}`:"
    ]
    for prompt in prompts:
        if prompt.options:
            choices = ", ".join(f"{n}. {o}" for n, o in enumerate(prompt.options, start=1))
        else:
            choices = "free text"
        lines.append(f"- `{shorts[prompt.id]}`: {gist(prompt.question)} ({choices})")
    return "\n".join(lines)


def quote(text: str) -> str:
    """An answer as quoted in outcome texts, shortened."""
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"


def expired_text(prompt: Prompt) -> str:
    """What an answer to an expired prompt hears (approvals fail closed)."""
    if prompt.kind == "approval":
        return "This request expired and was not approved; ask again if it is still needed."
    return "This request expired; ask again if it is still needed."
