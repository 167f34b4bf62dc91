"""Which part of a prompt the requester wrote, so control syntax is read from it alone.

The Host ends its last user message with the message it answers, under a header line
(`answer_header`); everything before it (earlier messages, fenced thread context) was written
by others. A stand-in provider parses `campaign:` lines and plans only from `requester_text`.
"""

from __future__ import annotations

import re
from typing import Final

ANSWER_HEADER: Final = "Message to answer, from "
_HEADER_LINE = re.compile(rf"^{re.escape(ANSWER_HEADER)}.*:[ \t]*$", re.MULTILINE)
# A fenced block closes only with its own (random) marker; `fence` neutralises closing tags
# inside, so a block cannot be ended early by the text it holds.
_FENCED = re.compile(
    r'<untrusted-data id="(?P<marker>[^"]*)"[^>]*>.*?</untrusted-data id="(?P=marker)">',
    re.DOTALL,
)


def answer_header(label: str) -> str:
    """The line that introduces the message being answered, written by `label`."""
    return f"{ANSWER_HEADER}{label}:"


def requester_text(text: str) -> str:
    """What the requester wrote: the text after the LAST answer header line.

    The answered message always comes last, so a header forged earlier (in someone else's
    message) is followed by the real one; a forged header inside the requester's own text
    only narrows what is read to part of that same text. Without any header (a prompt that
    is not a Host turn) fenced untrusted blocks are removed and the rest is read.
    """
    headers = list(_HEADER_LINE.finditer(text))
    if headers:
        return text[headers[-1].end() :].lstrip("\r\n")
    return _FENCED.sub("", text)
