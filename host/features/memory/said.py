"""What of a message memory takes in: the person's own words, without the lines that tell
the bot what to do. A plan line (`s1: shell: …`, `confirm`), a `campaign:`, `schedule:` or
`watch:` line, a control word or `mute`/`snooze` is an instruction, not something the person
said about themselves, so it never becomes an episode or a fact."""

from __future__ import annotations

import re

from agents.campaign_syntax import parse_campaign
from agents.plan_syntax import is_plan_line
from host.conversation.service import control_word

# The scheduled-task lines (`schedule: …`, `watch: …`) and the quieting words (`mute`,
# `unmute`, `snooze 2h`). Their parsers live in host.features.schedules, which this feature
# may not import (each capability's glue is independent): these are the same line starts.
_TASK_LINE = re.compile(r"^\s*(?:schedule|watch)\s*:", re.IGNORECASE)
_QUIETING = re.compile(
    r"^\s*(?:mute|unmute|snooze\s+\d+\s*[smhd]\w*)(?:\s+t_[0-9a-f]{8})?\s*[.!]?\s*$",
    re.IGNORECASE,
)


def is_instruction(line: str) -> bool:
    """True for a line that tells the bot what to do (as its own parsers read it)."""
    return (
        is_plan_line(line)
        or parse_campaign(line) is not None
        or control_word(line) is not None
        or _TASK_LINE.match(line) is not None
        or _QUIETING.match(line) is not None
    )


def persons_words(text: str) -> str:
    """`text` without its instruction lines ("" when nothing else is left)."""
    return "\n".join(line for line in text.splitlines() if not is_instruction(line)).strip()
