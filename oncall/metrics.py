"""Measurements parsed from a round's output, chunk by chunk (SPEC §9: regex or JSON lines).

A `MetricReader` is fed the raw bytes a machine returns since the last read. It keeps the
unterminated tail between reads, so a line split across two reads is parsed once, whole, and
a UTF-8 sequence split across them decodes correctly. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from core.patterns import UserPattern
from oncall.model import MetricSpec

# A metric line longer than this is not a metric line; keeping it whole would let one
# runaway writer (a 10 MB line without a newline) grow the buffer, and the state the
# monitor persists on every poll, without bound.
MAX_LINE_BYTES = 64 * 1024
# What a source line is clipped to when it is recorded next to its measurement.
MAX_SOURCE_CHARS = 500
TRUNCATED_MARKER = " …[rest of an over-long line dropped]"
_CLIP = "…"
# Trailing punctuation a loose pattern such as `loss=(\S+)` picks up in "loss=0.42,".
_TRAILING_JUNK = ",;:)]}'\""
_SPECIAL_WORDS = frozenset({"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity"})


@dataclass(frozen=True)
class ParsedValue:
    """One value read from one output line (the line clipped to 500 characters)."""

    name: str
    value: float
    line: str


def parse_number(text: str) -> float | None:
    """The float in `text` (nan/inf included), or None when it is not a number."""
    cleaned = text.strip().rstrip(_TRAILING_JUNK).strip()
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _json_number(raw: object) -> float | None:
    """A JSON value as a measurement: numbers, and the strings "nan"/"inf"/"-inf"."""
    if isinstance(raw, bool):  # bool is an int to Python, but `true` is not a measurement
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str) and raw.strip().lower() in _SPECIAL_WORDS:
        return float(raw.strip())
    return None


def _lookup(record: dict[str, object], key: str) -> object:
    """`record[key]`, or a dotted path (`metrics.loss`) into nested objects."""
    if key in record:
        return record[key]
    node: object = record
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def clip_line(text: str, start: int = 0, end: int = 0) -> str:
    """`text` clipped to 500 characters, keeping the span [start, end) of the value in view."""
    if len(text) <= MAX_SOURCE_CHARS:
        return text
    room = MAX_SOURCE_CHARS - 2 * len(_CLIP)
    if end <= room:
        return text[:room] + _CLIP
    begin = max(0, min(start - room // 4, len(text) - room))
    tail = _CLIP if begin + room < len(text) else ""
    return _CLIP + text[begin : begin + room] + tail


def _last_segment_start(buf: bytes) -> int:
    """Where the last non-empty `\\r`-separated segment of `buf` starts (a progress bar's
    last rewrite); 0 when there is no `\\r` before it."""
    core = buf.rstrip(b"\r")
    return core.rfind(b"\r") + 1


class MetricReader:
    """Parses one metric from output chunks; keeps the partial last line between chunks.

    Regex mode (the default): the first match of `spec.default_pattern()` in a line, its first
    group parsed as a float. JSON mode (`spec.json_key`): a line that is a JSON object holding
    the key (or a dotted path) with a number or a "nan"/"inf" string; when both a json_key and
    an explicit pattern are given, JSON is tried first, then the pattern. One value per line.
    A line rewritten with `\\r` (progress bars) counts only with its last non-empty segment.
    """

    def __init__(
        self,
        spec: MetricSpec,
        *,
        pending: bytes = b"",
        truncated: bool = False,
        dropping: bool = False,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self._spec = spec
        self._regex: UserPattern | None = None
        if spec.json_key is None or spec.pattern is not None:
            # RE2, bounded: the pattern may be a person's (SPEC §9), matched on the event loop.
            self._regex = UserPattern(spec.default_pattern())
        self._max = max_line_bytes
        self._pending = pending
        self._truncated = truncated
        # Dropping: the current segment hit the cap and bytes are discarded until it ends.
        self._dropping = dropping
        self._dropped = 0
        self._settle()

    @property
    def pending(self) -> bytes:
        """The unterminated tail kept for the next chunk (at most `max_line_bytes` + 1)."""
        return self._pending

    @property
    def truncated(self) -> bool:
        """Whether the pending tail is the head of an over-long line whose rest was dropped."""
        return self._truncated

    @property
    def dropping(self) -> bool:
        """Whether bytes are being discarded until the over-long segment ends."""
        return self._dropping

    @property
    def dropped_bytes(self) -> int:
        """Bytes discarded from over-long lines since this reader was made."""
        return self._dropped

    def feed(self, chunk: bytes) -> list[ParsedValue]:
        """Values of the lines that `chunk` completes, in order."""
        data = chunk
        if self._dropping:
            ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
            if not ends:
                self._dropped += len(data)
                return []
            self._dropped += min(ends)
            data = data[min(ends) :]
            self._dropping = False
        *lines, rest = (self._pending + data).split(b"\n")
        values: list[ParsedValue] = []
        for index, raw in enumerate(lines):
            value = self._parse_raw(raw, head_truncated=self._truncated and index == 0)
            if value is not None:
                values.append(value)
        if lines:
            self._truncated = False
        self._pending = rest
        self._settle()
        return values

    def flush(self) -> list[ParsedValue]:
        """At job end: the value of the last, unterminated line (if any); empties the buffer."""
        raw, head_truncated = self._pending, self._truncated
        self._pending, self._truncated, self._dropping = b"", False, False
        value = self._parse_raw(raw, head_truncated=head_truncated) if raw else None
        return [] if value is None else [value]

    def parse_line(self, line: str) -> ParsedValue | None:
        """The value in one complete, decoded line, or None."""
        text = line.rstrip("\r\n")
        if self._spec.json_key is not None:
            found = self._parse_json(text)
            if found is not None or self._regex is None:
                return found
        return self._parse_regex(text)

    def _settle(self) -> None:
        """Keep only the last progress-bar rewrite of the pending tail, capped in size."""
        pending = self._pending
        cut = _last_segment_start(pending)
        if cut > 0:
            pending = pending[cut:]
            self._truncated = False  # the over-long segment was rewritten: it no longer counts
        closed = pending.endswith(b"\r")
        body = pending.rstrip(b"\r")
        if len(body) > self._max:
            self._dropped += len(body) - self._max
            body = body[: self._max]
            self._truncated = True
            self._dropping = not closed
        self._pending = body + (b"\r" if closed else b"")

    def _parse_raw(self, raw: bytes, *, head_truncated: bool) -> ParsedValue | None:
        segments = raw.rstrip(b"\r").split(b"\r")
        segment = segments[-1]
        text = segment.decode("utf-8", errors="replace")
        if head_truncated and len(segments) == 1:
            text += TRUNCATED_MARKER
        return self.parse_line(text)

    def _parse_regex(self, text: str) -> ParsedValue | None:
        assert self._regex is not None
        match = self._regex.search(text, "head")  # a capped line keeps its head
        raw = None if match is None else match.group(1)
        if match is None or raw is None:
            return None
        value = parse_number(raw)
        if value is None:
            return None
        return ParsedValue(self._spec.name, value, clip_line(text, match.start(1), match.end(1)))

    def _parse_json(self, text: str) -> ParsedValue | None:
        stripped = text.strip()
        if not (stripped.startswith("{") and stripped.endswith("}")):
            return None
        try:
            record = json.loads(stripped)
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        assert self._spec.json_key is not None
        value = _json_number(_lookup(record, self._spec.json_key))
        if value is None:
            return None
        return ParsedValue(self._spec.name, value, clip_line(stripped))
