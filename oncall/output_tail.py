"""The last lines of a round's output, quoted when a round dies: to people as a plain code
block (no fence markers), to models fenced as untrusted data (by the decider).

The job's output is not the bot's text: control characters are dropped (an escape sequence
must not restyle a terminal or a log), and the code block's fence is longer than any run of
backticks inside, so nothing in the output can close it early.
"""

from __future__ import annotations

import re
from typing import Final

TAIL_LINES: Final = 10
TAIL_CHARS: Final = 1500
# How much of the log end is read to find those lines.
TAIL_BYTES: Final = 16384
_CONTROL: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def last_lines(data: bytes, *, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last `lines` non-empty lines of `data`, at most `chars` characters (cut at the
    front, marked with `…`), without control characters."""
    text = _CONTROL.sub("", data.decode("utf-8", errors="replace").replace("\r\n", "\n"))
    kept = [line.rstrip() for line in text.split("\n") if line.strip()][-lines:]
    out = "\n".join(kept)
    if len(out) > chars:
        out = "…" + out[-(chars - 1) :]
    return out
